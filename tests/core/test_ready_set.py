"""job_ready holds exactly the queued jobs (migration 0012), after every kind of transition.

The statement triggers on jobs keep it; these tests drive the real paths (enqueue, claim, fail
and retry, promotion, reaping into suspects, release, cancel, dependency release and cancel,
DLQ replay, the job actions, deletes) and then random multi-row statements, and compare the
ready set with `jobs WHERE status = 'queued'` after each step. See docs/TESTING.md, "Ready set".
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from jobyard.core import claim, dlq, enqueue, maintenance, transitions
from jobyard.core.actions import act_on_job
from jobyard.db.pool import Conn
from jobyard.domain.ids import JobId, ProjectId, QueueId, WorkerId
from jobyard.domain.models import QueueRef
from jobyard.domain.schemas import BatchCreate, BatchItem, JobCreate
from tests.factories import make_queue, make_worker

READY = """SELECT job_id AS id, queue_id, priority, run_at, suspect FROM job_ready
           ORDER BY job_id"""
QUEUED = """SELECT id, queue_id, priority, run_at, suspect FROM jobs WHERE status = 'queued'
            ORDER BY id"""


async def _rows(conn: Conn, query: str) -> list[dict[str, Any]]:
    return await (await conn.execute(query)).fetchall()  # type: ignore[arg-type]


async def assert_ready_exact(conn: Conn, step: str) -> int:
    """The ready set equals the queued jobs, field for field, and no job is in it twice."""
    ready = await _rows(conn, READY)
    queued = await _rows(conn, QUEUED)
    assert ready == queued, step
    return len(ready)


def _ref(queue: dict[str, Any]) -> QueueRef:
    return QueueRef(
        id=QueueId(queue["id"]),
        name=queue["name"],
        priority=0,
        is_paused=False,
        max_concurrency=None,
    )


async def test_every_real_transition_keeps_the_ready_set_exact(conn: Conn) -> None:
    queue = await make_queue(conn, name="ready")
    project = ProjectId(queue["project_id"])
    worker = WorkerId((await make_worker(conn, project_id=project))["id"])
    ref = _ref(queue)

    parent = await enqueue.enqueue(conn, project, JobCreate(queue="ready", handler="a"))
    for i in range(3):
        await enqueue.enqueue(conn, project, JobCreate(queue="ready", handler="a", priority=i))
    await enqueue.enqueue(conn, project, JobCreate(queue="ready", handler="a", delay_ms=60_000))
    child = await enqueue.enqueue(
        conn, project, JobCreate(queue="ready", handler="child", depends_on=[parent.job["id"]])
    )
    assert child.job["status"] == "waiting"
    await enqueue.enqueue_batch(
        conn,
        project,
        BatchCreate(
            queue="ready", jobs=[BatchItem(handler="b", payload={"i": i}) for i in range(5)]
        ),
    )
    assert await assert_ready_exact(conn, "enqueue") == 9

    held = await claim.claim_batch(conn, ref, worker, 4, lease_s=30, start=True)
    assert len(held) == 4
    await assert_ready_exact(conn, "claim")

    by_id = {j.id: j for j in held}
    done = by_id.get(JobId(parent.job["id"])) or held[0]
    await transitions.complete_many(conn, [done])
    await assert_ready_exact(conn, "complete (and a waiting child released when its parent ends)")

    failing = [j for j in held if j.id != done.id]
    await transitions.fail(conn, failing[0], "Boom", "retry me")
    await assert_ready_exact(conn, "fail → scheduled")
    await maintenance.promote_due(conn, now=failing[0].lock_expires_at + timedelta(days=1))
    await assert_ready_exact(conn, "promotion scheduled → queued")

    await transitions.fail(conn, failing[1], "Boom", "no retry", retryable=False)
    await assert_ready_exact(conn, "fail → dead_letter")
    await act_on_job(conn, project, "retry", failing[1].id)
    await assert_ready_exact(conn, "retry action on a dead job")
    # A dead letter is replayed once, and not after its job was retried: another one.
    (again,) = await claim.claim_batch(conn, ref, worker, 1, lease_s=30, start=True)
    await transitions.fail(conn, again, "Boom", "no retry", retryable=False)
    letter = await (
        await conn.execute(
            "SELECT id FROM dead_letter_jobs WHERE job_id = %s AND replayed_at IS NULL",
            (again.id,),
        )
    ).fetchone()
    assert letter is not None
    await dlq.replay(conn, project, letter["id"])
    await assert_ready_exact(conn, "DLQ replay")

    await transitions.release_many(conn, [failing[2]])
    await assert_ready_exact(conn, "release (graceful drain)")

    lost = await claim.claim_batch(conn, ref, worker, 2, lease_s=30, start=True)
    await maintenance.reap_expired_leases(
        conn, now=lost[0].lock_expires_at + timedelta(hours=1), suspect_delay_s=0.0
    )
    suspects = await _rows(
        conn,
        "SELECT id FROM job_ready r JOIN jobs j ON j.id = r.job_id WHERE r.suspect AND j.suspect",
    )
    assert len(suspects) == 2
    await assert_ready_exact(conn, "reaper requeue as suspects")
    solo = await claim.claim(conn, ref, worker, 5, lease_s=30, start=True, solo=True)
    assert [j.suspect for j in solo.jobs] == [True]
    await assert_ready_exact(conn, "solo claim of a suspect")

    scheduled = await enqueue.enqueue(
        conn, project, JobCreate(queue="ready", handler="a", delay_ms=60_000)
    )
    await act_on_job(conn, project, "run_now", JobId(scheduled.job["id"]))
    await assert_ready_exact(conn, "run-now on a scheduled job")

    victim = (await _rows(conn, QUEUED))[0]["id"]
    await transitions.cancel(conn, project, JobId(victim))
    await assert_ready_exact(conn, "cancel a queued job")

    doomed = await enqueue.enqueue(conn, project, JobCreate(queue="ready", handler="p"))
    orphan = await enqueue.enqueue(
        conn, project, JobCreate(queue="ready", handler="c", depends_on=[doomed.job["id"]])
    )
    assert orphan.job["status"] == "waiting"
    await transitions.cancel(conn, project, JobId(doomed.job["id"]))
    await assert_ready_exact(conn, "a parent cancelled cancels its waiting child")

    await conn.execute("UPDATE jobs SET priority = priority + 7 WHERE status = 'queued'")
    await assert_ready_exact(conn, "priority changed while queued")
    await conn.execute(
        "UPDATE jobs SET run_at = run_at - interval '1 minute' "
        "WHERE id = (SELECT min(id) FROM jobs WHERE status = 'queued')"
    )
    await assert_ready_exact(conn, "run_at changed while queued")
    await conn.execute(
        "DELETE FROM jobs WHERE id = (SELECT max(id) FROM jobs WHERE status = 'queued')"
    )
    await assert_ready_exact(conn, "delete a queued job")
    await conn.execute("DELETE FROM queues WHERE id = %s", (queue["id"],))
    assert await assert_ready_exact(conn, "delete the queue (its jobs go with it)") == 0


STATUSES = ("queued", "scheduled", "waiting", "running", "done", "cancelled")


async def test_random_statements_on_jobs_keep_the_ready_set_exact(conn: Conn) -> None:
    """A seeded random walk of multi-row inserts, updates (status, priority, run_at, suspect,
    queue) and deletes, some of two statements in one transaction or one CTE."""
    rng = random.Random(15)
    queues = [await make_queue(conn) for _ in range(2)]
    project = queues[0]["project_id"]
    others = [await make_queue(conn, project_id=project) for _ in range(2)]
    queue_ids = [q["id"] for q in others]
    steps = 0
    for step in range(150):
        kind = rng.choice(("insert", "update", "update", "update", "delete", "cte"))
        status = rng.choice(STATUSES)
        # A held job has a lease and a finished one a finish time (the table's checks).
        set_status = f"""status = '{status}'::job_status,
            lock_expires_at = CASE WHEN '{status}' = 'running' THEN now() + interval '1 minute' END,
            finished_at = CASE WHEN '{status}' IN ('done', 'cancelled') THEN now() END"""
        share = rng.choice((2, 3, 5))
        pick = f"mod(id, {share}) = {rng.randrange(share)}"
        if kind == "insert":
            await conn.execute(
                """INSERT INTO jobs (project_id, queue_id, handler, status, priority,
                                      lock_expires_at, finished_at)
                    SELECT %s, (%s::bigint[])[1 + g %% 2], 'r', s.st, (g * 31) %% 5,
                           CASE WHEN s.st = 'running' THEN now() + interval '1 minute' END,
                           CASE WHEN s.st IN ('done', 'cancelled') THEN now() END
                    FROM generate_series(1, %s) g,
                         LATERAL (SELECT (%s::job_status[])[1 + (g * 7 + %s) %% 6] AS st) s""",  # type: ignore[arg-type]
                (project, queue_ids, rng.randint(1, 12), list(STATUSES), step),
            )
        elif kind == "update":
            field = rng.choice(("status", "priority", "run_at", "suspect", "queue"))
            change = {
                "status": set_status,
                "priority": "priority = priority + 1",
                "run_at": "run_at = run_at + interval '1 second'",
                "suspect": "suspect = NOT suspect",
                "queue": f"queue_id = {rng.choice(queue_ids)}",
            }[field]
            await conn.execute(f"UPDATE jobs SET {change} WHERE {pick}")  # type: ignore[arg-type]
        elif kind == "delete":
            await conn.execute(f"DELETE FROM jobs WHERE {pick} AND mod(id * 7, 10) < 3")  # type: ignore[arg-type]
        else:
            # Two statements of one transaction, and an insert and update in one query.
            async with conn.transaction():
                await conn.execute(f"UPDATE jobs SET {set_status} WHERE {pick}")  # type: ignore[arg-type]
                await conn.execute(
                    f"""WITH moved AS (UPDATE jobs SET priority = -priority
                                       WHERE status = 'queued' AND {pick} RETURNING id)
                        INSERT INTO jobs (project_id, queue_id, handler)
                        SELECT %s, %s, 'cte' FROM moved LIMIT 3""",  # type: ignore[arg-type]
                    (project, queue_ids[0]),
                )
        await assert_ready_exact(conn, f"step {step}: {kind}")
        steps += 1
    assert steps == 150
    assert await assert_ready_exact(conn, "end") > 0
