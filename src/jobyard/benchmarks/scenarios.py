"""The measurements. Each takes a fresh database URL and returns its numbers.

Intervals that the engine records are read back with the database clock (executions'
started_at/finished_at, jobs' created_at), so process start-up and polling never leak into them;
enqueue rates are timed around the library calls a user makes, with the host's monotonic clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from jobyard.benchmarks.processes import BenchError, WorkerProcesses
from jobyard.core import claim, enqueue, projects
from jobyard.db import run
from jobyard.db.pool import Conn, connect
from jobyard.domain import limits
from jobyard.domain.ids import ProjectId
from jobyard.domain.models import QueueRef
from jobyard.domain.schemas import BatchCreate, BatchItem, JobCreate

PROJECT: Final = "bench/bench"
QUEUE: Final = "bench"
HANDLER: Final = "noop"
POLL_S: Final = 1.0  # progress only: rates come from the database clock, and a poll is a count
# A drain or pickup run that makes no progress for this long has failed (a broken build).
STALL_TIMEOUT_S: Final = 60.0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DrainResult:
    jobs: int
    processes: int
    window_s: float  # first claim → last completion (database clock): the reported key
    wall_s: float  # worker processes spawned → last completion (database clock)

    @property
    def per_s(self) -> float:
        return self.jobs / self.window_s

    @property
    def wall_per_s(self) -> float:
        return self.jobs / self.wall_s


@dataclass(frozen=True)
class PickupResult:
    jobs: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


async def _setup(conn: Conn) -> tuple[ProjectId, QueueRef]:
    project_id = await projects.resolve_project(conn, PROJECT, create=True)
    await projects.ensure_queues(conn, project_id, [QUEUE])
    (queue,) = await claim.queues_by_names(conn, project_id, [QUEUE])
    return project_id, queue


async def _db_clock(conn: Conn) -> datetime:
    row = await run.one(conn, "bench_clock")
    assert row is not None
    now: datetime = row["now"]
    return now


async def enqueue_single(url: str, total: int, connections: int) -> float:
    """`total` calls of core.enqueue.enqueue as the Python SDK's defer makes them (the new job's
    id and status back, not the whole row), split over `connections` concurrent connections,
    each call its own autocommit transaction; returns enqueues per second."""
    conns = [await connect(url, autocommit=True) for _ in range(connections)]
    try:
        project_id, _ = await _setup(conns[0])
        share = [
            total // connections + (1 if i < total % connections else 0) for i in range(connections)
        ]

        async def producer(conn: Conn, n: int) -> None:
            for _ in range(n):
                job = JobCreate(queue=QUEUE, handler=HANDLER)
                await enqueue.enqueue(conn, project_id, job, whole_job=False)

        started = time.perf_counter()
        await asyncio.gather(*(producer(c, n) for c, n in zip(conns, share, strict=True)))
        elapsed = time.perf_counter() - started
    finally:
        for c in conns:
            await c.close()
    return total / elapsed


async def enqueue_batches(url: str, total: int) -> float:
    """`total` jobs through core.enqueue.enqueue_batch in batches of the API's cap, timed from
    plain dicts (validation included) to the last commit; returns jobs per second."""
    conn = await connect(url, autocommit=True)
    try:
        project_id, _ = await _setup(conn)
        items: list[dict[str, Any]] = [{"handler": HANDLER} for _ in range(total)]
        started = time.perf_counter()
        for at in range(0, total, limits.MAX_BATCH_SIZE):
            batch = BatchCreate.model_validate(
                {"queue": QUEUE, "jobs": items[at : at + limits.MAX_BATCH_SIZE]}
            )
            await enqueue.enqueue_batch(conn, project_id, batch)
        elapsed = time.perf_counter() - started
    finally:
        await conn.close()
    return total / elapsed


async def _prefill(conn: Conn, project_id: ProjectId, total: int) -> None:
    for at in range(0, total, limits.MAX_BATCH_SIZE):
        size = min(limits.MAX_BATCH_SIZE, total - at)
        batch = BatchCreate(queue=QUEUE, jobs=[BatchItem(handler=HANDLER)] * size)
        await enqueue.enqueue_batch(conn, project_id, batch)


async def _wait_until_done(
    conn: Conn, queue: QueueRef, total: int, workers: WorkerProcesses
) -> None:
    done = -1
    last_change = time.monotonic()
    while True:
        await asyncio.sleep(POLL_S)
        workers.check_alive()
        row = await run.one(conn, "bench_queue_progress", {"queue_id": queue.id})
        assert row is not None
        if row["done"] >= total:
            return
        if row["done"] != done:
            done, last_change = row["done"], time.monotonic()
        elif time.monotonic() - last_change > STALL_TIMEOUT_S:
            raise BenchError(f"no job finished for {STALL_TIMEOUT_S:g} s ({done}/{total} done)")


async def drain(url: str, total: int, processes: int, concurrency: int) -> DrainResult:
    """Fill a queue with `total` no-op jobs, then start `processes` workers at once and wait
    until every job is done."""
    conn = await connect(url, autocommit=True)
    workers = WorkerProcesses(url, PROJECT, QUEUE, concurrency, processes)
    try:
        project_id, queue = await _setup(conn)
        await _prefill(conn, project_id, total)
        spawned = await _db_clock(conn)
        workers.start()
        await _wait_until_done(conn, queue, total, workers)
        # A fast drain can end before a late worker installs its SIGTERM handler.
        await _wait_registered(conn, workers, processes)
        row = await run.one(conn, "bench_drain_window", {"queue_id": queue.id})
    finally:
        codes = workers.stop()
        await conn.close()
    assert row is not None
    if row["jobs"] != total or row["succeeded"] != total or row["executions"] != total:
        raise BenchError(
            f"expected {total} jobs each run once and succeeded, got {row['jobs']} jobs, "
            f"{row['executions']} executions, {row['succeeded']} succeeded"
        )
    if any(code != 0 for code in codes):
        raise BenchError(f"a worker did not drain cleanly (exit codes {codes})")
    return DrainResult(
        jobs=total,
        processes=processes,
        window_s=(row["last_finished"] - row["first_started"]).total_seconds(),
        wall_s=(row["last_finished"] - spawned).total_seconds(),
    )


async def _wait_registered(conn: Conn, workers: WorkerProcesses, expected: int) -> None:
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while time.monotonic() < deadline:
        workers.check_alive()
        row = await run.one(conn, "bench_workers_active")
        if row is not None and row["active"] >= expected:
            return
        await asyncio.sleep(0.05)
    raise BenchError(f"workers had not registered after {STALL_TIMEOUT_S:g} s")


async def _wait_listening(conn: Conn, workers: WorkerProcesses, expected: int) -> None:
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while time.monotonic() < deadline:
        workers.check_alive()
        row = await run.one(conn, "bench_listening")
        if row is not None and row["listening"] >= expected:
            return
        await asyncio.sleep(0.05)
    raise BenchError(f"workers were not listening after {STALL_TIMEOUT_S:g} s")


async def pickup(url: str, total: int, gap_s: float, concurrency: int) -> PickupResult:
    """One idle worker process; `total` single enqueues `gap_s` apart. Latency of a job is its
    first execution's started_at (the claim) minus its created_at (the enqueue), both by the
    database clock."""
    conn = await connect(url, autocommit=True)
    workers = WorkerProcesses(url, PROJECT, QUEUE, concurrency, 1)
    try:
        project_id, queue = await _setup(conn)
        workers.start()
        await _wait_listening(conn, workers, 1)
        # The first claim after LISTEN runs at once; let it find the empty queue first.
        await asyncio.sleep(0.5)
        for _ in range(total):
            job = JobCreate(queue=QUEUE, handler=HANDLER)
            await enqueue.enqueue(conn, project_id, job, whole_job=False)
            await asyncio.sleep(gap_s)
        await _wait_until_done(conn, queue, total, workers)
        row = await run.one(conn, "bench_pickup_latency", {"queue_id": queue.id})
    finally:
        workers.stop()
        await conn.close()
    assert row is not None and row["jobs"] == total
    return PickupResult(
        jobs=total,
        p50_ms=float(row["p50"]),
        p95_ms=float(row["p95"]),
        p99_ms=float(row["p99"]),
        max_ms=float(row["max"]),
    )
