"""Rows the scheduler tests need, written with plain SQL (independent of the claim code)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from jobyard.db.pool import Conn, connect

T0 = datetime(2026, 12, 4, 8, 0, 0, tzinfo=UTC)
# Nothing listens on port 1: connecting fails at once with a real OperationalError.
DEAD_URL = "postgresql://jobyard@127.0.0.1:1/nowhere?connect_timeout=2"


async def one(conn: Conn, query: str, *params: Any) -> dict[str, Any]:
    cur = await conn.execute(query, params)  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return row


async def all_rows(conn: Conn, query: str, *params: Any) -> list[dict[str, Any]]:
    cur = await conn.execute(query, params)  # type: ignore[arg-type]
    return await cur.fetchall()


async def make_held_job(
    conn: Conn,
    queue: dict[str, Any],
    worker: dict[str, Any],
    *,
    lock_expires_at: datetime,
    status: str = "running",
    attempt: int = 1,
    lease_lost_count: int = 0,
    solo_deaths: int = 0,
    started_at: datetime | None = None,
) -> dict[str, Any]:
    """A job a worker holds (claimed/running), as claim leaves it: the job row carries the run
    and no execution row exists until the run ends."""
    started = started_at or (lock_expires_at - timedelta(seconds=30))
    job = await one(
        conn,
        """INSERT INTO jobs (project_id, queue_id, handler, payload, status, attempt, execution_seq,
                             lease_lost_count, solo_deaths, worker_id, lock_expires_at, claimed_at,
                             started_at)
           VALUES (%s, %s, 'noop', '{"secret": 1}', %s::job_status, %s, %s, %s, %s, %s, %s, %s,
                   %s)
           RETURNING *""",
        queue["project_id"],
        queue["id"],
        status,
        attempt,
        lease_lost_count + 1,
        lease_lost_count,
        solo_deaths,
        worker["id"],
        lock_expires_at,
        started,
        started,
    )
    return job


async def make_worker_at(
    conn: Conn, project_id: int, *, last_heartbeat_at: datetime, status: str = "active"
) -> dict[str, Any]:
    return await one(
        conn,
        """INSERT INTO workers (project_id, name, concurrency, status, started_at,
                                last_heartbeat_at, stopped_at)
           VALUES (%s, 'w', 4, %s::worker_status, %s, %s,
                   CASE WHEN %s IN ('stopped', 'dead') THEN %s END)
           RETURNING *""",
        project_id,
        status,
        last_heartbeat_at,
        last_heartbeat_at,
        status,
        last_heartbeat_at,
    )


async def job(conn: Conn, job_id: int) -> dict[str, Any]:
    return await one(conn, "SELECT * FROM jobs WHERE id = %s", job_id)


async def execution(conn: Conn, job_id: int) -> dict[str, Any]:
    return await one(
        conn, "SELECT * FROM job_executions WHERE job_id = %s ORDER BY execution_seq DESC", job_id
    )


@asynccontextmanager
async def dead_database() -> AsyncIterator[Conn]:
    """A connection source whose database is down: raises psycopg's OperationalError."""
    conn = await connect(DEAD_URL, autocommit=True)
    yield conn  # pragma: no cover - never reached


def pooled(conn: Conn) -> Any:
    """A connection source that hands out one existing connection (no pool needed in tests)."""

    @asynccontextmanager
    async def source() -> AsyncIterator[Conn]:
        yield conn

    return source


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(plan_nodes(child))
    return nodes


async def wait_until(predicate: Callable[[], bool], within_s: float = 10.0) -> None:
    """Poll a condition (for loops running in tasks); fail the test if it never holds."""
    for _ in range(int(within_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")
