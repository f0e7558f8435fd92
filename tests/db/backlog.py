"""A queue with a backlog of queued jobs in a fresh clone, and the claim statement's parameters:
shared by the tests that look at what a backlog does to the ready set."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from jobyard.db import testing
from jobyard.db.pool import Conn, SyncConn, connect, connect_sync
from tests import factories

T = TypeVar("T")


@contextlib.contextmanager
def clone_with_backlog(
    admin_url: str, template: str, n: int, *, counters_published: bool = True
) -> Iterator[tuple[str, dict[str, Any]]]:
    """A fresh clone with autovacuum off on the ready partitions (nothing repairs them under the
    test), one queue and worker (`queue_and_worker`) and `n` queued jobs; its URL and the ids.

    The inserting backend publishes its change counters at its next chance. With
    `counters_published=False` it publishes just before the insert instead, so the backlog's
    counters wait for its next report: a second away at the least (ten if it stays idle)."""
    url = testing.create_clone(admin_url, template)
    try:
        with connect_sync(url, autocommit=True) as conn:
            for part in ("job_ready_0", "job_ready_1", "job_ready_2"):
                conn.execute(f"ALTER TABLE {part} SET (autovacuum_enabled = false)")
            ids = asyncio.run(queue_and_worker(url))
            if not counters_published:
                conn.execute("SELECT pg_stat_force_next_flush()")
                conn.execute("SELECT 1")  # the report that the flag forces, at this idle point
            queue_backlog(conn, ids["queue_id"], n)
            if counters_published:
                conn.execute("SELECT pg_stat_force_next_flush()")
            # Yielded with this backend still connected: one that exits publishes its counters.
            yield url, ids
    finally:
        testing.drop_database(admin_url, url)


def call(url: str, op: Callable[[Conn], Awaitable[T]]) -> T:
    """`op` on a new autocommit connection to `url`, from synchronous test code."""

    async def go() -> T:
        conn = await connect(url, autocommit=True)
        try:
            return await op(conn)
        finally:
            await conn.close()

    return asyncio.run(go())


async def queue_and_worker(url: str) -> dict[str, Any]:
    """A queue and a worker row; their ids as `queue_id` and `worker_id`."""
    conn = await connect(url, autocommit=True)
    try:
        queue = await factories.make_queue(conn)
        worker = await factories.make_worker(conn, project_id=queue["project_id"])
        return {"queue_id": queue["id"], "worker_id": worker["id"]}
    finally:
        await conn.close()


def queue_backlog(conn: SyncConn, queue_id: int, n: int) -> None:
    """`n` queued jobs in one statement (an autocommit connection), their ready rows with them."""
    conn.execute(
        "INSERT INTO jobs (project_id, queue_id, handler, payload)"
        " SELECT q.project_id, q.id, 'h', '{}' FROM queues q, generate_series(1, %(n)s)"
        " WHERE q.id = %(queue_id)s",
        {"n": n, "queue_id": queue_id},
    )


def claim_params(ids: dict[str, Any], n: int) -> dict[str, Any]:
    """`job_claim_batch`'s parameters: take and start `n` jobs of the queue for the worker."""
    return {
        "queue_id": ids["queue_id"],
        "worker_id": ids["worker_id"],
        "n": n,
        "lease_s": 30.0,
        "start": True,
        "solo": False,
        "limited": False,
        "now": None,
    }
