"""Batch enqueue sends its items as one JSON document; values must survive that trip exactly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from jobyard.core import claim, enqueue, projects, transitions, workflows
from jobyard.core.claim import queues_by_names
from jobyard.db.pool import Conn
from jobyard.domain.errors import Conflict
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.schemas import BatchCreate, JobCreate
from tests.factories import make_worker


async def _project(conn: Conn) -> ProjectId:
    project_id = await projects.resolve_project(conn, "acme/batch", create=True)
    await projects.ensure_queues(conn, project_id, ["default"])
    return project_id


async def test_batch_enqueue_stores_every_field_as_given(conn: Conn) -> None:
    """Regression: a JSON null payload became SQL NULL through jsonb_to_recordset (found by
    schemathesis as a 500 on POST /jobs/batch)."""
    project_id = await _project(conn)
    later = datetime.now(UTC) + timedelta(hours=1)
    batch = BatchCreate.model_validate(
        {
            "queue": "default",
            "jobs": [
                {"handler": "a", "payload": None},
                {"handler": "b", "payload": {"n": [1, "x", None]}, "priority": 7},
                {"handler": "c", "payload": "text", "run_at": later.isoformat()},
                {"handler": "d", "idempotency_key": "k1", "max_attempts": 2, "timeout_ms": 50},
            ],
        }
    )
    result = await enqueue.enqueue_batch(conn, project_id, batch)
    assert len(result.job_ids) == 4 and result.queued == 3
    cur = await conn.execute(
        """SELECT handler, payload, jsonb_typeof(payload) AS kind, priority, status::text,
                  run_at, idempotency_key, max_attempts, timeout_ms, batch_id
           FROM jobs WHERE id = ANY(%s) ORDER BY id""",
        (result.job_ids,),
    )
    rows = await cur.fetchall()
    assert [r["handler"] for r in rows] == ["a", "b", "c", "d"]
    assert rows[0]["payload"] is None and rows[0]["kind"] == "null"
    assert rows[1]["payload"] == {"n": [1, "x", None]} and rows[1]["priority"] == 7
    assert rows[2]["payload"] == "text" and rows[2]["status"] == "scheduled"
    assert abs((rows[2]["run_at"] - later).total_seconds()) < 0.001
    assert (rows[3]["idempotency_key"], rows[3]["max_attempts"], rows[3]["timeout_ms"]) == (
        "k1",
        2,
        50,
    )
    assert {r["batch_id"] for r in rows} == {result.batch_id}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_numbers_are_refused_before_they_can_be_written_as_null(bad: float) -> None:
    """pydantic's JSON writer turns NaN into null; validation must refuse it first."""
    with pytest.raises(ValidationError, match="NaN and Infinity") as caught:
        BatchCreate.model_validate({"jobs": [{"handler": "h", "payload": {"x": [1, bad]}}]})
    assert caught.value.errors()[0]["loc"] == ("jobs", 0, "payload")


async def test_both_paths_keep_the_items_order_and_only_keys_are_skipped(conn: Conn) -> None:
    """A batch without keys skips the idempotency arbiter (one path for the whole batch); with
    any key, the whole batch goes through it. Either way ids follow the items."""
    project_id = await _project(conn)

    async def handlers_of(items: list[dict[str, object]]) -> list[str]:
        batch = BatchCreate.model_validate({"queue": "default", "jobs": items})
        result = await enqueue.enqueue_batch(conn, project_id, batch)
        cur = await conn.execute(
            "SELECT handler FROM jobs WHERE id = ANY(%s) ORDER BY id", (result.job_ids,)
        )
        return [r["handler"] for r in await cur.fetchall()]

    plain = [{"handler": f"p{i}"} for i in range(5)]
    assert await handlers_of(plain) == ["p0", "p1", "p2", "p3", "p4"]
    keyed = [
        {"handler": "k0"},
        {"handler": "k1", "idempotency_key": "a"},
        {"handler": "k2"},
        {"handler": "k3", "idempotency_key": "a"},  # the same key again: skipped
    ]
    assert await handlers_of(keyed) == ["k0", "k1", "k2"]
    # A key seen before is skipped; the items without keys around it are inserted in order.
    again = [{"handler": "m0"}, {"handler": "m1", "idempotency_key": "a"}, {"handler": "m2"}]
    assert await handlers_of(again) == ["m0", "m2"]


async def _finish_all(conn: Conn, project_id: ProjectId) -> None:
    """Claim and complete every queued job, as a worker would."""
    (queue,) = await queues_by_names(conn, project_id, ["default"])
    worker = await make_worker(conn, project_id=project_id)
    jobs = await claim.claim_batch(conn, queue, WorkerId(worker["id"]), 100, lease_s=30)
    await transitions.start_many(conn, jobs)
    assert len(await transitions.complete_many(conn, jobs)) == len(jobs)


async def test_a_batch_holds_only_the_jobs_it_inserted_and_completes_with_them(
    conn: Conn,
) -> None:
    """Found as a user (2026-12-05): a batch whose items an idempotency key skipped kept the
    skipped items in its size, so `pending` never reached 0 and on_complete never fired."""
    project_id = await _project(conn)
    first = BatchCreate.model_validate(
        {"jobs": [{"handler": "h", "idempotency_key": "k1"}], "on_complete": {"handler": "cb"}}
    )
    earlier = await enqueue.enqueue_batch(conn, project_id, first)
    again = BatchCreate.model_validate(
        {
            "jobs": [
                {"handler": "h", "idempotency_key": "k1"},  # names the earlier batch's job
                {"handler": "h", "idempotency_key": "k2"},
                {"handler": "h", "idempotency_key": "k2"},  # the same key twice in one request
                {"handler": "h"},
            ],
            "on_complete": {"handler": "cb"},
        }
    )
    result = await enqueue.enqueue_batch(conn, project_id, again)
    assert len(result.job_ids) == 2 and result.batch_id != earlier.batch_id
    status = await workflows.batch_status(conn, project_id, result.batch_id)
    assert status["size"] == 2 and status["pending"] == 2
    await _finish_all(conn, project_id)
    for batch_id in (earlier.batch_id, result.batch_id):
        status = await workflows.batch_status(conn, project_id, batch_id)
        assert status["pending"] == 0 and status["completed_at"] is not None, status
        assert len(status["callback_job_ids"]) == 1, status


async def test_a_batch_whose_every_item_exists_answers_with_the_batch_that_made_them(
    conn: Conn,
) -> None:
    """A repeated batch request (a client retrying after a lost answer) makes no second batch:
    it gets the first one, whose callbacks fire once. Items from several requests: a 409."""
    project_id = await _project(conn)
    items = [{"handler": "h", "idempotency_key": f"k{i}"} for i in range(3)]
    body = {"jobs": items, "on_complete": {"handler": "cb"}}
    first = await enqueue.enqueue_batch(conn, project_id, BatchCreate.model_validate(body))
    batches = "SELECT count(*) AS n FROM job_batches"
    before = (await (await conn.execute(batches)).fetchone() or {})["n"]
    repeat = await enqueue.enqueue_batch(conn, project_id, BatchCreate.model_validate(body))
    assert (repeat.batch_id, repeat.job_ids, repeat.queued) == (first.batch_id, [], 0)
    assert (await (await conn.execute(batches)).fetchone() or {})["n"] == before

    await enqueue.enqueue(conn, project_id, JobCreate(handler="h", idempotency_key="solo"))
    mixed = {"jobs": [{"handler": "h", "idempotency_key": k} for k in ("k0", "solo")]}
    with pytest.raises(Conflict, match="every job of this batch already exists"):
        await enqueue.enqueue_batch(conn, project_id, BatchCreate.model_validate(mixed))
    assert (await (await conn.execute(batches)).fetchone() or {})["n"] == before
