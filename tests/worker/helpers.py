"""Shared by worker and acceptance tests: run a worker in-process, a tiny maintenance loop, polls."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from jobyard.core import maintenance
from jobyard.db.pool import Conn, connect
from jobyard.worker.app import App
from jobyard.worker.commands import worker_registry
from jobyard.worker.runtime import Worker, WorkerConfig

PROJECT = "test/proj"


def config(url: str, **overrides: Any) -> WorkerConfig:
    """Short intervals so lease and heartbeat behaviour shows within a second or two."""
    values: dict[str, Any] = {
        "url": url,
        "project": PROJECT,
        "queues": ("default",),
        "concurrency": 4,
        "heartbeat_interval_s": 0.3,
        "lease_s": 2.0,
        "poll_interval_s": 0.5,
        "drain_grace_s": 1.0,
        "queue_refresh_s": 0.5,
    }
    values.update(overrides)
    return WorkerConfig(**values)


@contextlib.asynccontextmanager
async def running_worker(
    url: str, app: App | None = None, **overrides: Any
) -> AsyncIterator[Worker]:
    worker = Worker(config(url, **overrides), worker_registry(app))
    task = asyncio.create_task(worker.run())
    ready = asyncio.create_task(worker.ready.wait())
    await asyncio.wait({task, ready}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        task.result()  # raises what stopped it
    assert worker.ready.is_set(), "worker did not start"
    try:
        yield worker
    finally:
        worker.request_drain()
        assert await asyncio.wait_for(task, 30) == 0


@contextlib.asynccontextmanager
async def maintenance_loop(
    url: str, interval_s: float = 0.2, *, poison_threshold: int = 3, suspect_delay_s: float = 0.0
) -> AsyncIterator[None]:
    """Promote due retries and reap expired leases, like `jobyard scheduler` does."""

    async def loop() -> None:
        conn = await connect(url, autocommit=True)
        try:
            while True:
                await maintenance.promote_due(conn)
                await maintenance.reap_expired_leases(
                    conn, poison_threshold=poison_threshold, suspect_delay_s=suspect_delay_s
                )
                await asyncio.sleep(interval_s)
        finally:
            await conn.close()

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(
    check: Callable[[], Awaitable[Any]],
    *,
    timeout: float = 30.0,  # noqa: ASYNC109 - a polling deadline, not a cancel scope
    interval: float = 0.05,
) -> Any:
    """Poll until `check()` returns something truthy; its last value otherwise fails the test."""
    deadline = time.monotonic() + timeout
    value = await check()
    while not value:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last: {value!r})")
        await asyncio.sleep(interval)
        value = await check()
    return value


async def rows(conn: Conn, query: str, *args: Any) -> list[dict[str, Any]]:
    cur = await conn.execute(query, args)  # type: ignore[arg-type]
    return await cur.fetchall()


async def scalar(conn: Conn, query: str, *args: Any) -> Any:
    found = await rows(conn, query, *args)
    assert found, query
    return next(iter(found[0].values()))


async def job_status(conn: Conn, job_id: int) -> str:
    return str(await scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", job_id))


async def executions(conn: Conn, job_id: int) -> list[dict[str, Any]]:
    return await rows(
        conn,
        "SELECT execution_seq, attempt, outcome::text AS outcome, attempt_charged, error"
        " FROM job_executions WHERE job_id = %s ORDER BY execution_seq",
        job_id,
    )
