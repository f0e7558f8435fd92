"""Batch counts kept on the row only for batches with callbacks (migration 0013).

A batch without callbacks is counted from its jobs on read (`job_batch_progress`): its
completions never write or lock its `job_batches` row, so two workers finishing its jobs do not
queue on that row. A batch with callbacks keeps the counters and the row lock: the exactly-once
decision needs them. docs/DATABASE.md, "Batch counts"."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from jobyard.core import transitions, workflows
from jobyard.db import migrate
from jobyard.db.pool import Conn, connect
from tests.workflows.test_policy import _batch, _callbacks, _claim, _dead_letter, _setup

_COUNTS = ("size", "done", "failed", "cancelled", "pending", "completed_at")


def _counts(status: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(status[k] for k in _COUNTS)


async def _row(conn: Conn, batch_id: int) -> dict[str, Any]:
    """The stored row itself, with its version (xmin changes on every write)."""
    cur = await conn.execute(
        "SELECT xmin::text AS version, done, failed, cancelled, completed_at"
        " FROM job_batches WHERE id = %s",
        (batch_id,),
    )
    row = await cur.fetchone()
    assert row is not None
    return row


async def _last_finished(conn: Conn, batch_id: int) -> Any:
    cur = await conn.execute(
        "SELECT max(finished_at) AS t FROM jobs WHERE batch_id = %s", (batch_id,)
    )
    row = await cur.fetchone()
    assert row is not None
    return row["t"]


async def test_a_callback_less_batch_is_counted_from_its_jobs_and_its_row_never_written(
    conn: Conn,
) -> None:
    project, queue, worker = await _setup(conn)
    batch = await _batch(conn, project, 5)
    before = await _row(conn, batch)
    j1, j2, j3 = await _claim(conn, queue, worker, 3)
    await transitions.complete_many(conn, [j1, j2])
    status = await workflows.batch_status(conn, project, batch)
    assert _counts(status) == (5, 2, 0, 0, 3, None)
    await _dead_letter(conn, j3)
    await workflows.cancel_batch(conn, project, batch)
    status = await workflows.batch_status(conn, project, batch)
    assert _counts(status) == (5, 2, 1, 2, 0, await _last_finished(conn, batch))
    assert status["completed_at"] is not None
    # Five final transitions, and the batch row is the version the enqueue wrote.
    assert await _row(conn, batch) == before


async def test_deleting_final_jobs_of_a_callback_less_batch_keeps_its_counts(conn: Conn) -> None:
    project, queue, worker = await _setup(conn)
    batch = await _batch(conn, project, 4)
    j1, j2, j3 = await _claim(conn, queue, worker, 3)
    await transitions.complete_many(conn, [j1, j2])
    await _dead_letter(conn, j3)
    before = await workflows.batch_status(conn, project, batch)
    assert _counts(before)[1:5] == (2, 1, 0, 1)
    # Retention (or the delete action) removes the finished jobs; the pending one stays.
    await conn.execute(
        "DELETE FROM jobs WHERE batch_id = %s AND status IN ('done', 'dead_letter')", (batch,)
    )
    assert await workflows.batch_status(conn, project, batch) == before
    (j4,) = await _claim(conn, queue, worker, 1)
    await transitions.complete_many(conn, [j4])
    after = await workflows.batch_status(conn, project, batch)
    assert _counts(after)[1:5] == (3, 1, 0, 0)
    assert after["completed_at"] == await _last_finished(conn, batch)


async def test_callbacks_cannot_be_attached_to_a_batch_after_it_is_created(conn: Conn) -> None:
    project, _, _ = await _setup(conn)
    plain = await _batch(conn, project, 2)
    with_callbacks = await _batch(conn, project, 2, on_complete={"handler": "fin"})
    for batch, callbacks in ((plain, '{"on_complete": {"handler": "x", "queue": "default"}}'),
                             (with_callbacks, "{}")):  # fmt: skip
        with pytest.raises(psycopg.errors.CheckViolation, match="callbacks are fixed"):
            await conn.execute(
                "UPDATE job_batches SET callbacks = %s::jsonb WHERE id = %s", (callbacks, batch)
            )


@pytest.mark.parametrize("callbacks", [False, True], ids=["no_callbacks", "on_complete"])
async def test_two_completions_of_one_batch_wait_for_each_other_only_with_callbacks(
    conn: Conn, db_url: str, callbacks: bool
) -> None:
    """One completion's transaction stays open while a second worker completes another job of
    the same batch. Without callbacks nothing is shared: it returns while the first is still
    open. With them the batch row lock serializes the two (the exactly-once point)."""
    project, queue, worker = await _setup(conn)
    spec = {"on_complete": {"handler": "fin", "queue": "callbacks"}} if callbacks else {}
    batch = await _batch(conn, project, 2, **spec)
    j1, j2 = await _claim(conn, queue, worker, 2)
    first = await connect(db_url)  # not autocommit: held open until commit
    second = await connect(db_url, autocommit=True)
    try:
        await first.execute("SELECT 1")
        assert await transitions.complete_many(first, [j1]) == {j1.id}
        finishing = asyncio.create_task(transitions.complete_many(second, [j2]))
        await asyncio.wait({finishing}, timeout=1.0)
        waited = not finishing.done()
        await first.commit()
        assert await asyncio.wait_for(finishing, 10) == {j2.id}
        assert waited == callbacks, "waited for the other completion" if waited else "did not wait"
        fired = [c["handler"] for c in await _callbacks(conn, batch)]
        assert fired == (["fin"] if callbacks else [])
        status = await workflows.batch_status(conn, project, batch)
        assert _counts(status)[1:5] == (2, 0, 0, 0)
    finally:
        await first.close()
        await second.close()


async def test_the_migration_moves_callback_less_counts_off_the_row_and_back(
    conn: Conn, db_url: str
) -> None:
    """Downgrade to 0012 folds the derived counts into the row (as 0008 kept them); a purge
    under 0012 leaves the row counting the gone job; the upgrade keeps only the gone jobs on
    the row, and the read is the same on both sides."""
    project, queue, worker = await _setup(conn)
    plain = await _batch(conn, project, 3)
    with_cb = await _batch(conn, project, 2, on_complete={"handler": "fin", "queue": "callbacks"})
    claimed = await _claim(conn, queue, worker, 5)
    await transitions.complete_many(conn, [j for j in claimed if j.id != claimed[2].id])
    await _dead_letter(conn, claimed[2])
    head = {b: await workflows.batch_status(conn, project, b) for b in (plain, with_cb)}
    assert _counts(head[plain])[1:5] == (2, 1, 0, 0)
    assert _counts(head[with_cb])[1:5] == (2, 0, 0, 0)

    await asyncio.to_thread(migrate.downgrade, db_url, "0012")
    for batch in (plain, with_cb):
        row = await _row(conn, batch)
        want = head[batch]
        assert (row["done"], row["failed"], row["completed_at"]) == (
            want["done"],
            want["failed"],
            want["completed_at"],
        )
    await conn.execute("DELETE FROM jobs WHERE batch_id = %s AND status = 'done'", (plain,))
    await asyncio.to_thread(migrate.upgrade, db_url)

    row = await _row(conn, plain)
    assert (row["done"], row["failed"]) == (2, 0)  # the two purged jobs only
    for batch in (plain, with_cb):
        assert await workflows.batch_status(conn, project, batch) == head[batch]
