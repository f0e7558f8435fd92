"""Enqueue, claim, fenced transitions, retries, DLQ — against a real PostgreSQL."""

from __future__ import annotations

import dataclasses
import random
from datetime import timedelta
from typing import Any

import pytest

from jobyard.core import claim, dlq, enqueue, lease, transitions
from jobyard.core.claim import queues_by_names
from jobyard.core.maintenance import reap_expired_leases
from jobyard.db.pool import Conn
from jobyard.domain.enums import ExecutionOutcome, JobStatus
from jobyard.domain.errors import IdempotencyConflict, LeaseLost, NotFound, ValidationFailed
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.models import QueueRef
from jobyard.domain.schemas import BatchCreate, BatchItem, JobCreate
from tests.factories import make_queue, make_worker


async def _setup(conn: Conn, **queue_kw: Any) -> tuple[ProjectId, QueueRef, WorkerId]:
    q = await make_queue(conn, name="default", **queue_kw)
    w = await make_worker(conn, project_id=q["project_id"])
    project = ProjectId(q["project_id"])
    (ref,) = await queues_by_names(conn, project, ["default"])
    return project, ref, WorkerId(w["id"])


async def _scalar(conn: Conn, query: str, *args: Any) -> Any:
    row = await (await conn.execute(query, args)).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return next(iter(row.values()))


async def test_enqueue_immediate_is_queued_and_delayed_is_scheduled(conn: Conn) -> None:
    project, _, _ = await _setup(conn)
    now_job = await enqueue.enqueue(conn, project, JobCreate(handler="noop"))
    later = await enqueue.enqueue(conn, project, JobCreate(handler="noop", delay_ms=60_000))
    assert now_job.job["status"] == "queued"
    assert later.job["status"] == "scheduled"
    assert later.job["run_at"] > now_job.job["run_at"] + timedelta(seconds=59)


async def test_idempotency_same_payload_returns_existing_different_payload_conflicts(
    conn: Conn,
) -> None:
    project, _, _ = await _setup(conn)
    spec = JobCreate(handler="noop", payload={"a": 1}, idempotency_key="k")
    first = await enqueue.enqueue(conn, project, spec)
    again = await enqueue.enqueue(conn, project, spec)
    assert first.created and not again.created
    assert again.job["id"] == first.job["id"]
    with pytest.raises(IdempotencyConflict):
        await enqueue.enqueue(
            conn, project, JobCreate(handler="noop", payload={"a": 2}, idempotency_key="k")
        )
    assert await _scalar(conn, "SELECT count(*) FROM jobs") == 1


@pytest.mark.parametrize("whole_job", [True, False])
async def test_enqueue_sends_back_the_whole_job_or_its_id_and_status(
    conn: Conn, whole_job: bool
) -> None:
    """whole_job=False (the SDK's defer) gets only what it uses; the rules are the same."""
    project, _, _ = await _setup(conn)
    spec = JobCreate(handler="noop", payload={"a": 1}, idempotency_key="k")
    first = await enqueue.enqueue(conn, project, spec, whole_job=whole_job)
    expected = await _scalar(conn, "SELECT to_jsonb(j) FROM jobs j")
    if whole_job:
        assert first.job.keys() == expected.keys() and first.job["id"] == expected["id"]
    else:
        assert first.job == {"id": expected["id"], "status": "queued"}
    # The idempotent twin is read back whole on both paths; the conflict is the same.
    again = await enqueue.enqueue(conn, project, spec, whole_job=whole_job)
    assert (again.created, again.job["id"], again.job["payload"]) == (
        False,
        expected["id"],
        {"a": 1},
    )
    with pytest.raises(IdempotencyConflict):
        await enqueue.enqueue(
            conn, project, spec.model_copy(update={"payload": {"a": 2}}), whole_job=whole_job
        )
    with pytest.raises(NotFound):
        await enqueue.enqueue(
            conn, project, JobCreate(queue="nope", handler="noop"), whole_job=whole_job
        )


async def test_enqueue_to_unknown_queue_is_not_found(conn: Conn) -> None:
    project, _, _ = await _setup(conn)
    with pytest.raises(NotFound):
        await enqueue.enqueue(conn, project, JobCreate(queue="nope", handler="noop"))


def test_oversized_payload_is_refused_before_sql() -> None:
    with pytest.raises(ValueError, match="64 KB"):
        JobCreate(handler="noop", payload={"x": "y" * 70_000})


async def test_batch_enqueue_is_one_statement_with_a_batch_row(conn: Conn) -> None:
    project, _, _ = await _setup(conn)
    items = [BatchItem(handler="noop", payload={"i": i}) for i in range(500)]
    result = await enqueue.enqueue_batch(conn, project, BatchCreate(queue="default", jobs=items))
    assert len(result.job_ids) == 500 and result.queued == 500
    assert await _scalar(conn, "SELECT count(DISTINCT batch_id) FROM jobs") == 1
    assert await _scalar(conn, "SELECT size FROM job_batches WHERE id = %s", result.batch_id) == 500


async def test_claim_orders_by_priority_then_age_and_skips_paused(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    low = await enqueue.enqueue(conn, project, JobCreate(handler="noop", priority=0))
    high = await enqueue.enqueue(conn, project, JobCreate(handler="noop", priority=5))
    got = await claim.claim_batch(conn, queue, worker, 1, lease_s=30)
    assert [j.id for j in got] == [high.job["id"]]
    await conn.execute("UPDATE queues SET is_paused = true WHERE id = %s", (queue.id,))
    assert await claim.claim_batch(conn, queue, worker, 5, lease_s=30) == []
    await conn.execute("UPDATE queues SET is_paused = false WHERE id = %s", (queue.id,))
    got = await claim.claim_batch(conn, queue, worker, 5, lease_s=30)
    assert [j.id for j in got] == [low.job["id"]]


async def test_claim_respects_max_concurrency(conn: Conn) -> None:
    project, queue, worker = await _setup(conn, max_concurrency=2)
    for _ in range(5):
        await enqueue.enqueue(conn, project, JobCreate(handler="noop"))
    assert len(await claim.claim_batch(conn, queue, worker, 10, lease_s=30)) == 2
    assert await claim.claim_batch(conn, queue, worker, 10, lease_s=30) == []


async def test_a_claim_says_when_the_queue_s_limit_left_less_room_than_asked(conn: Conn) -> None:
    """What tells a worker to claim again as soon as one of the queue's jobs finishes."""
    project, queue, worker = await _setup(conn, max_concurrency=3)
    for _ in range(5):
        await enqueue.enqueue(conn, project, JobCreate(handler="noop"))
    first = await claim.claim(conn, queue, worker, 1, lease_s=30)
    assert (len(first.jobs), first.room_bound) == (1, False)
    second = await claim.claim(conn, queue, worker, 10, lease_s=30)
    assert (len(second.jobs), second.room_bound) == (2, True)
    third = await claim.claim(conn, queue, worker, 1, lease_s=30)
    assert (third.jobs, third.room_bound) == ([], True)
    await conn.execute("UPDATE queues SET is_paused = true WHERE id = %s", (queue.id,))
    # Paused: no finished job makes room, so nothing to wake for.
    assert (await claim.claim(conn, queue, worker, 1, lease_s=30)).room_bound is False
    unlimited = dataclasses.replace(queue, max_concurrency=None)
    assert (await claim.claim(conn, unlimited, worker, 10, lease_s=30)).room_bound is False


async def test_complete_is_fenced_by_execution_seq(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    await enqueue.enqueue(conn, project, JobCreate(handler="noop"))
    (job,) = await claim.claim_batch(conn, queue, worker, 1, lease_s=30)
    assert await transitions.start_many(conn, [job]) == {job.id}
    # Simulate the reaper handing the job to someone else: the seq moves on.
    await conn.execute("UPDATE jobs SET execution_seq = execution_seq + 1 WHERE id = %s", (job.id,))
    assert await transitions.complete_many(conn, [job]) == set()
    with pytest.raises(LeaseLost):
        await transitions.fail(conn, job, "E", "boom")
    with pytest.raises(LeaseLost):
        await transitions.append_log(conn, job, "info", "hello")
    hb = await lease.heartbeat(conn, worker, [job], lease_s=30, capacity=1)
    assert hb.alive and job.id not in hb.held


async def test_failures_retry_with_backoff_then_dead_letter_with_history(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    created = await enqueue.enqueue(conn, project, JobCreate(handler="fail", max_attempts=3))
    job_id = created.job["id"]
    for attempt in (1, 2, 3):
        await conn.execute(
            "UPDATE jobs SET status = 'queued', run_at = now() WHERE id = %s AND status = 'scheduled'",
            (job_id,),
        )
        (job,) = await claim.claim_batch(conn, queue, worker, 1, lease_s=30)
        assert job.attempt == attempt
        await transitions.start_many(conn, [job])
        result = await transitions.fail(
            conn, job, "ValueError", f"bad {attempt}", rng=random.Random(0)
        )
        expected = JobStatus.SCHEDULED if attempt < 3 else JobStatus.DEAD_LETTER
        assert result.status is expected
    rows = await (
        await conn.execute(
            "SELECT execution_seq, attempt, outcome FROM job_executions WHERE job_id = %s"
            " ORDER BY execution_seq",
            (job_id,),
        )
    ).fetchall()
    assert [(r["execution_seq"], r["attempt"], r["outcome"]) for r in rows] == [
        (1, 1, "failed"),
        (2, 2, "failed"),
        (3, 3, "failed"),
    ]
    letter = await (
        await conn.execute("SELECT * FROM dead_letter_jobs WHERE job_id = %s", (job_id,))
    ).fetchone()
    assert letter is not None and letter["reason"] == "exhausted"
    assert letter["error"] == "ValueError: bad 3" and letter["attempts"] == 3
    assert letter["error_fingerprint"]


async def test_timeout_outcome_is_recorded_and_counts_as_failure(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    await enqueue.enqueue(conn, project, JobCreate(handler="sleep", max_attempts=1))
    (job,) = await claim.claim_batch(conn, queue, worker, 1, lease_s=30)
    await transitions.start_many(conn, [job])
    result = await transitions.fail(
        conn, job, "TimeoutError", "took too long", outcome=ExecutionOutcome.TIMED_OUT
    )
    assert result.status is JobStatus.DEAD_LETTER
    assert await _scalar(conn, "SELECT reason::text FROM dead_letter_jobs") == "timed_out"
    assert await _scalar(conn, "SELECT outcome::text FROM job_executions") == "timed_out"


async def test_release_refunds_the_attempt(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    await enqueue.enqueue(conn, project, JobCreate(handler="noop"))
    (job,) = await claim.claim_batch(conn, queue, worker, 1, lease_s=30)
    assert await transitions.release_many(conn, [job]) == {job.id}
    row = await (await conn.execute("SELECT status, attempt FROM jobs")).fetchone()
    assert row == {"status": "queued", "attempt": 0}
    ex = await (
        await conn.execute("SELECT outcome, attempt_charged FROM job_executions")
    ).fetchone()
    assert ex == {"outcome": "released", "attempt_charged": False}


async def test_cancel_pending_at_once_and_running_by_request(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    a = await enqueue.enqueue(conn, project, JobCreate(handler="noop"))
    b = await enqueue.enqueue(conn, project, JobCreate(handler="noop"))
    cancelled = await transitions.cancel(conn, project, a.job["id"])
    assert cancelled is not None and cancelled["status"] == "cancelled"
    (job,) = await claim.claim_batch(conn, queue, worker, 1, lease_s=30)
    assert job.id == b.job["id"]
    await transitions.start_many(conn, [job])
    requested = await transitions.cancel(conn, project, job.id)
    assert requested is not None and requested["status"] == "running"
    hb = await lease.heartbeat(conn, worker, [job], lease_s=30, capacity=1)
    assert job.id in hb.cancel_requested
    assert await transitions.finish_cancelled(conn, job)
    assert await _scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", job.id) == "cancelled"
    assert await transitions.cancel(conn, project, job.id) is None  # already finished


async def test_dlq_replay_with_edited_payload_creates_a_new_queued_job(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    await enqueue.enqueue(
        conn, project, JobCreate(handler="fail", payload={"v": 1}, max_attempts=1)
    )
    (job,) = await claim.claim_batch(conn, queue, worker, 1, lease_s=30)
    await transitions.start_many(conn, [job])
    result = await transitions.fail(conn, job, "E", "x")
    assert result.dead_letter_id is not None
    with pytest.raises(ValidationFailed, match="64 KB"):
        await dlq.update_payload(conn, project, result.dead_letter_id, {"x": "y" * 70_000})
    replayed = await dlq.replay(conn, project, result.dead_letter_id, payload={"v": 2})
    assert replayed["status"] == "queued" and replayed["payload"] == {"v": 2}
    assert replayed["id"] != job.id
    letter = await dlq.get(conn, project, result.dead_letter_id)
    assert letter["replay_job_id"] == replayed["id"] and letter["replayed_at"] is not None
    await dlq.delete(conn, project, result.dead_letter_id)
    with pytest.raises(NotFound):
        await dlq.get(conn, project, result.dead_letter_id)


async def test_dependencies_wait_for_parents(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    parent = await enqueue.enqueue(conn, project, JobCreate(handler="noop"))
    child = await enqueue.enqueue(
        conn, project, JobCreate(handler="noop", depends_on=[parent.job["id"]])
    )
    assert child.job["status"] == "waiting"
    with pytest.raises(NotFound):
        await enqueue.enqueue(conn, project, JobCreate(handler="noop", depends_on=[999_999]))
    (job,) = await claim.claim_batch(conn, queue, worker, 5, lease_s=30)
    assert job.id == parent.job["id"]
    await transitions.start_many(conn, [job])
    assert await transitions.complete_many(conn, [job], [{"ok": True}]) == {job.id}
    status = await _scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", child.job["id"])
    assert status == "queued"


async def _runs(conn: Conn, job_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT execution_seq, attempt, worker_id, outcome::text, attempt_charged, started_at,"
        " finished_at, duration_ms FROM job_executions WHERE job_id = %s ORDER BY execution_seq",
        (job_id,),
    )
    return await cur.fetchall()


@pytest.mark.parametrize(
    "end", ["complete", "fail", "release", "release_unstarted", "cancel", "reap"]
)
async def test_a_run_is_carried_by_the_job_row_and_recorded_once_when_it_ends(
    conn: Conn, end: str
) -> None:
    project, queue, worker = await _setup(conn)
    await enqueue.enqueue(conn, project, JobCreate(handler="noop", max_attempts=5))
    (job,) = await claim.claim_batch(conn, queue, worker, 1, lease_s=30)
    if end != "release_unstarted":
        await transitions.start_many(conn, [job])
    # In flight: the job row describes the run; no execution row exists yet.
    held = await (
        await conn.execute(
            "SELECT status::text, worker_id, execution_seq, attempt,"
            " coalesce(started_at, claimed_at) AS started_at FROM jobs"
        )
    ).fetchone()
    assert held is not None
    assert (held["status"], held["worker_id"], held["execution_seq"], held["attempt"]) == (
        "claimed" if end == "release_unstarted" else "running",
        worker,
        1,
        1,
    )
    assert await _runs(conn, job.id) == []
    if end == "complete":
        assert await transitions.complete_many(conn, [job]) == {job.id}
    elif end == "fail":
        await transitions.fail(conn, job, "ValueError", "bad", rng=random.Random(0))
    elif end.startswith("release"):
        assert await transitions.release_many(conn, [job]) == {job.id}
    elif end == "cancel":
        assert await transitions.cancel(conn, project, job.id) is not None
        assert await transitions.finish_cancelled(conn, job)
    else:
        await conn.execute("UPDATE jobs SET lock_expires_at = now() - interval '1 minute'")
        assert (await reap_expired_leases(conn)).requeued == 1
    outcome, charged = {
        "complete": ("succeeded", True),
        "fail": ("failed", True),
        "release": ("released", False),
        "release_unstarted": ("released", False),
        "cancel": ("cancelled", True),
        "reap": ("lease_lost", False),
    }[end]
    (row,) = await _runs(conn, job.id)
    assert (row["execution_seq"], row["attempt"], row["worker_id"]) == (1, 1, worker)
    assert (row["outcome"], row["attempt_charged"]) == (outcome, charged)
    # started_at is the job's start of this run (its claim if it never started), even where
    # the transition cleared it on the job row.
    assert row["started_at"] == held["started_at"]
    assert row["finished_at"] >= row["started_at"] and row["duration_ms"] >= 0
    # A second end of the same run is fenced out and writes nothing.
    assert await transitions.complete_many(conn, [job]) == set()
    assert len(await _runs(conn, job.id)) == 1
