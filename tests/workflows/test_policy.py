"""Dependencies, the failure policy and batch callbacks at the engine level (one connection).

Issue 13 point 5 and issue 14 points 1–3: the jobs_final_effects trigger (migration 0008)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobyard.core import claim, enqueue, transitions, workflows
from jobyard.core.claim import queues_by_names
from jobyard.db.pool import Conn, connect
from jobyard.domain.errors import Conflict, IllegalTransition, NotFound, ValidationFailed
from jobyard.domain.ids import JobId, ProjectId, WorkerId
from jobyard.domain.models import ClaimedJob, QueueRef
from jobyard.domain.schemas import BatchCreate, JobCreate, WorkflowCreate
from tests.factories import make_project, make_queue, make_worker


async def _setup(conn: Conn) -> tuple[ProjectId, QueueRef, WorkerId]:
    q = await make_queue(conn, name="default")
    await make_queue(conn, name="callbacks", project_id=q["project_id"])
    w = await make_worker(conn, project_id=q["project_id"])
    project = ProjectId(q["project_id"])
    (ref,) = await queues_by_names(conn, project, ["default"])
    return project, ref, WorkerId(w["id"])


async def _status(conn: Conn, job_id: int) -> tuple[str, str | None]:
    cur = await conn.execute(
        "SELECT status::text, cancel_reason FROM jobs WHERE id = %s", (job_id,)
    )
    row = await cur.fetchone()
    assert row is not None
    return row["status"], row["cancel_reason"]


async def _job(conn: Conn, project: ProjectId, *parents: int, **kw: Any) -> int:
    result = await enqueue.enqueue(
        conn, project, JobCreate(handler="noop", depends_on=list(parents), **kw)
    )
    return int(result.job["id"])


async def _claim(conn: Conn, queue: QueueRef, worker: WorkerId, n: int = 100) -> list[ClaimedJob]:
    return await claim.claim_batch(conn, queue, worker, n, lease_s=30, start=True)


async def _dead_letter(conn: Conn, job: ClaimedJob) -> None:
    await transitions.fail(conn, job, "RuntimeError", "boom", retryable=False)


async def test_dead_lettered_parent_cancels_a_chain_with_reasons_naming_the_parent(
    conn: Conn,
) -> None:
    project, queue, worker = await _setup(conn)
    a = await _job(conn, project)
    b = await _job(conn, project, a)
    c = await _job(conn, project, b)
    (ja,) = await _claim(conn, queue, worker)
    await _dead_letter(conn, ja)
    assert await _status(conn, b) == (
        "cancelled",
        f"dependency failed: parent job {a} ended dead_letter",
    )
    assert await _status(conn, c) == (
        "cancelled",
        f"dependency failed: parent job {b} was cancelled because job {a} ended dead_letter",
    )


async def test_fan_in_child_is_cancelled_when_one_parent_is_cancelled(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    p1, p2, p3 = [await _job(conn, project) for _ in range(3)]
    child = await _job(conn, project, p1, p2, p3)
    jobs = {j.id: j for j in await _claim(conn, queue, worker, 1)}
    await transitions.complete_many(conn, list(jobs.values()))
    await transitions.cancel(conn, project, JobId(p2))
    assert await _status(conn, child) == (
        "cancelled",
        f"dependency failed: parent job {p2} ended cancelled",
    )
    # The last parent finishing later does not revive it.
    rest = await _claim(conn, queue, worker)
    await transitions.complete_many(conn, rest)
    assert (await _status(conn, child))[0] == "cancelled"


async def test_run_anyway_child_runs_after_a_failed_parent(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    p1 = await _job(conn, project)
    p2 = await _job(conn, project)
    child = await _job(conn, project, p1, p2, run_anyway=True)
    j1, j2 = await _claim(conn, queue, worker)
    await _dead_letter(conn, j1)
    assert (await _status(conn, child))[0] == "waiting"
    await transitions.complete_many(conn, [j2], [{"v": 2}])
    assert (await _status(conn, child))[0] == "queued"
    assert await workflows.parent_results(conn, child) == {p1: None, p2: {"v": 2}}


async def test_fan_in_child_queued_only_when_every_parent_is_done(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    parents = [await _job(conn, project) for _ in range(3)]
    child = await _job(conn, project, *parents)
    claimed = await _claim(conn, queue, worker)
    for i, job in enumerate(claimed):
        assert (await _status(conn, child))[0] == "waiting"
        await transitions.complete_many(conn, [job], [i])
    assert (await _status(conn, child))[0] == "queued"
    assert await workflows.parent_results(conn, child) == dict(zip(parents, [0, 1, 2], strict=True))


async def test_enqueue_refuses_foreign_missing_and_failed_parents(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    other = await make_project(conn)
    await make_queue(conn, name="default", project_id=other["id"])
    foreign = await _job(conn, ProjectId(other["id"]))
    with pytest.raises(NotFound, match=rf"do not exist in this project: \[{foreign}\]"):
        await _job(conn, project, foreign)
    dead = await _job(conn, project)
    (job,) = await _claim(conn, queue, worker)
    await _dead_letter(conn, job)
    with pytest.raises(Conflict, match=f"parent job {dead} already ended dead_letter"):
        await _job(conn, project, dead)
    assert (
        await enqueue.enqueue(
            conn, project, JobCreate(handler="noop", depends_on=[dead], run_anyway=True)
        )
    ).job["status"] == "queued"


async def test_workflow_cycles_and_unknown_steps_are_refused(conn: Conn) -> None:
    project, _, _ = await _setup(conn)
    cyclic = WorkflowCreate.model_validate(
        {
            "steps": [
                {"key": "a", "handler": "noop", "after": ["c"]},
                {"key": "b", "handler": "noop", "after": ["a"]},
                {"key": "c", "handler": "noop", "after": ["b"]},
            ]
        }
    )
    with pytest.raises(ValidationFailed, match="the steps form a cycle: "):
        await workflows.enqueue_workflow(conn, project, cyclic)
    unknown = WorkflowCreate.model_validate(
        {"steps": [{"key": "a", "handler": "noop", "after": ["zz"]}]}
    )
    with pytest.raises(NotFound, match="unknown steps"):
        await workflows.enqueue_workflow(conn, project, unknown)
    cur = await conn.execute("SELECT count(*) AS n FROM jobs")
    assert (await cur.fetchone()) == {"n": 0}


async def test_diamond_workflow_orders_and_passes_results(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    wf = WorkflowCreate.model_validate(
        {
            "steps": [
                {"key": "join", "handler": "noop", "after": ["left", "right"]},
                {"key": "left", "handler": "noop", "after": ["top"]},
                {"key": "right", "handler": "noop", "after": ["top"]},
                {"key": "top", "handler": "noop"},
            ]
        }
    )
    ids = (await workflows.enqueue_workflow(conn, project, wf)).job_ids
    (top,) = await _claim(conn, queue, worker)
    assert top.id == ids["top"]
    await transitions.complete_many(conn, [top], [1])
    mid = await _claim(conn, queue, worker)
    assert {j.id for j in mid} == {ids["left"], ids["right"]}
    await transitions.complete_many(conn, mid, [10, 20] if mid[0].id == ids["left"] else [20, 10])
    (join,) = await _claim(conn, queue, worker)
    assert join.id == ids["join"]
    assert await workflows.parent_results(conn, join.id) == {ids["left"]: 10, ids["right"]: 20}
    graph = await workflows.graph(conn, project, JobId(ids["left"]))
    assert len(graph.nodes) == 4 and len(graph.edges) == 4


async def test_retrying_a_failed_step_lets_the_workflow_continue(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    a = await _job(conn, project)
    b = await _job(conn, project, a)
    c = await _job(conn, project, b)
    (ja,) = await _claim(conn, queue, worker)
    await _dead_letter(conn, ja)
    assert (await _status(conn, c))[0] == "cancelled"
    result = await workflows.retry_step(conn, project, JobId(a))
    assert sorted(result["revived"]) == [b, c] and result["still_blocked"] == []
    assert await _status(conn, b) == ("waiting", None)
    (ja,) = await _claim(conn, queue, worker)
    assert ja.id == a and ja.attempt == 2  # one more attempt than it had used (retry now)
    await transitions.complete_many(conn, [ja])
    (jb,) = await _claim(conn, queue, worker)
    assert jb.id == b
    with pytest.raises(IllegalTransition, match="cannot retry a job that is running"):
        await workflows.retry_step(conn, project, JobId(b))


async def test_a_step_cancelled_by_its_parent_is_retried_through_the_parent(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    a = await _job(conn, project)
    b = await _job(conn, project, a)
    (ja,) = await _claim(conn, queue, worker)
    await _dead_letter(conn, ja)
    with pytest.raises(IllegalTransition, match="retry that parent"):
        await workflows.retry_step(conn, project, JobId(b))
    assert (await _status(conn, b))[0] == "cancelled"


async def test_cancel_workflow_cancels_pending_steps_only(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    a = await _job(conn, project)
    b = await _job(conn, project, a)
    (_ja,) = await _claim(conn, queue, worker)
    out = await workflows.cancel_workflow(conn, project, JobId(b))
    assert out == {"cancelled": [b], "requested": [a]}
    assert await _status(conn, b) == ("cancelled", f"workflow cancelled (through job {b})")
    with pytest.raises(NotFound):
        await workflows.cancel_workflow(conn, project, JobId(10**9))


async def _batch(conn: Conn, project: ProjectId, n: int, **callbacks: Any) -> int:
    body = BatchCreate.model_validate(
        {"jobs": [{"handler": "noop", "payload": {"i": i}} for i in range(n)], **callbacks}
    )
    return (await enqueue.enqueue_batch(conn, project, body)).batch_id


async def _callbacks(conn: Conn, batch_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT j.handler, j.payload FROM job_batches b JOIN jobs j ON j.id = ANY (b.callback_job_ids)"
        " WHERE b.id = %s ORDER BY j.id",
        (batch_id,),
    )
    return await cur.fetchall()


async def test_batch_counts_and_fires_success_and_complete_callbacks_once(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    cb = {
        "on_success": {"handler": "ok", "queue": "callbacks", "payload": {"tag": "s"}},
        "on_failure": {"handler": "bad", "queue": "callbacks"},
        "on_complete": {"handler": "fin", "queue": "callbacks"},
    }
    batch = await _batch(conn, project, 5, **cb)
    jobs = await _claim(conn, queue, worker)
    await transitions.complete_many(conn, jobs[:3])
    status = await workflows.batch_status(conn, project, batch)
    assert (status["size"], status["done"], status["pending"], status["completed_at"]) == (
        5,
        3,
        2,
        None,
    )
    await transitions.complete_many(conn, jobs[3:])
    fired = await _callbacks(conn, batch)
    summary = {"id": batch, "size": 5, "done": 5, "failed": 0, "cancelled": 0}
    assert fired == [
        {"handler": "fin", "payload": {"batch": summary}},
        {"handler": "ok", "payload": {"tag": "s", "batch": summary}},
    ]


async def test_batch_with_a_dead_letter_and_a_cancel_fires_failure_callback(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    batch = await _batch(
        conn, project, 3, on_success={"handler": "ok"}, on_failure={"handler": "bad"}
    )
    j1, j2 = await _claim(conn, queue, worker, 2)
    await _dead_letter(conn, j1)
    await transitions.complete_many(conn, [j2])
    assert await _callbacks(conn, batch) == []
    out = await workflows.cancel_batch(conn, project, batch)
    assert len(out["cancelled"]) == 1
    status = await workflows.batch_status(conn, project, batch)
    assert (status["done"], status["failed"], status["cancelled"], status["pending"]) == (
        1,
        1,
        1,
        0,
    )
    assert [c["handler"] for c in await _callbacks(conn, batch)] == ["bad"]


async def test_batch_callback_queue_must_exist(conn: Conn) -> None:
    project, _, _ = await _setup(conn)
    with pytest.raises(NotFound, match="callback queue 'nope'"):
        await _batch(conn, project, 1, on_complete={"handler": "x", "queue": "nope"})


async def test_a_parent_finishing_while_its_child_is_enqueued_still_releases_it(
    conn: Conn, db_url: str
) -> None:
    """The enqueue locks its parents FOR SHARE: a parent's completion waits for the child's
    transaction, so its trigger sees the new child (without the lock the child waits forever)."""
    project, queue, worker = await _setup(conn)
    parent = await _job(conn, project)
    (held,) = await _claim(conn, queue, worker)
    enqueuer = await connect(db_url)  # not autocommit: the enqueue stays open until commit
    completer = await connect(db_url, autocommit=True)
    try:
        await enqueuer.execute("SELECT 1")  # the caller's transaction is open
        child = await _job(enqueuer, project, parent)
        finishing = asyncio.create_task(transitions.complete_many(completer, [held]))
        await asyncio.sleep(0.5)
        lock_waited = not finishing.done()
        await enqueuer.commit()
        assert await finishing == {held.id}
        assert await _status(conn, child) == ("queued", None)
        assert lock_waited, "the completion did not wait for the enqueue's lock on the parent"
    finally:
        await enqueuer.close()
        await completer.close()
