"""Workflow measurements (`jobyard bench --workflows`): chain step-to-step latency against
plain pickup, a 10,000-job fan-in (last completion → callback started), and the cost of the
dependency bookkeeping per job against a plain drain. Intervals are read with the database
clock, as in scenarios.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from jobyard.benchmarks import scenarios
from jobyard.benchmarks.processes import BenchError, WorkerProcesses
from jobyard.benchmarks.scenarios import (
    HANDLER,
    PROJECT,
    QUEUE,
    STALL_TIMEOUT_S,
    _prefill,
    _setup,
    _wait_registered,
    _wait_until_done,
)
from jobyard.core import enqueue, workflows
from jobyard.db import run
from jobyard.db.pool import connect
from jobyard.domain.schemas import BatchCreate, BatchItem, CallbackSpec, WorkflowCreate

CHAIN_CONCURRENCY: Final = 10


@dataclass(frozen=True)
class WorkflowSizes:
    chain: int = 200
    fan_in: int = 10_000
    drain: int = 20_000
    pickup: int = 200
    pickup_gap_s: float = 0.020
    processes: int = 2
    drain_concurrency: int = 100


FULL: Final = WorkflowSizes()
QUICK: Final = WorkflowSizes(chain=10, fan_in=200, drain=300, pickup=5, pickup_gap_s=0.005)


async def _until(check: Callable[[], Awaitable[bool]], what: str, workers: WorkerProcesses) -> None:
    deadline = time.monotonic() + STALL_TIMEOUT_S * 5
    while True:
        workers.check_alive()
        if await check():
            return
        if time.monotonic() > deadline:
            raise BenchError(f"{what} did not finish")
        await asyncio.sleep(0.05)


async def chain_latency(url: str, steps: int) -> dict[str, float]:
    """One idle worker process; a chain of `steps` no-op jobs. Each step's latency is its
    start minus its parent's finish."""
    conn = await connect(url, autocommit=True)
    workers = WorkerProcesses(url, PROJECT, QUEUE, CHAIN_CONCURRENCY, 1)
    try:
        project_id, queue = await _setup(conn)
        workers.start()
        await _wait_registered(conn, workers, 1)
        await asyncio.sleep(0.5)
        body = WorkflowCreate.model_validate({"steps": [
            {"key": f"s{i}", "queue": QUEUE, "handler": HANDLER,
             "after": [f"s{i - 1}"] if i else []}
            for i in range(steps)
        ]})  # fmt: skip
        ids = list((await workflows.enqueue_workflow(conn, project_id, body)).job_ids.values())

        async def done() -> bool:
            row = await run.one(conn, "bench_job_done", {"ids": ids})
            return bool(row and row["done"])

        await _until(done, "the chain", workers)
        row = await run.one(conn, "bench_chain_latency", {"queue_id": queue.id})
    finally:
        workers.stop()
        await conn.close()
    assert row is not None and row["steps"] == steps - 1
    return {"chain_step_p50_ms": float(row["p50"]), "chain_step_p99_ms": float(row["p99"])}


async def fan_in(url: str, size: int, processes: int, concurrency: int) -> dict[str, float]:
    """A batch of `size` no-op jobs with an on_complete callback, drained by `processes`
    workers: the last member's finish to the callback's start."""
    conn = await connect(url, autocommit=True)
    workers = WorkerProcesses(url, PROJECT, QUEUE, concurrency, processes)
    try:
        project_id, _ = await _setup(conn)
        body = BatchCreate(
            queue=QUEUE,
            jobs=[BatchItem(handler=HANDLER)] * size,
            on_complete=CallbackSpec(handler=HANDLER, queue=QUEUE),
        )
        batch = await enqueue.enqueue_batch(conn, project_id, body)
        workers.start()

        async def fired() -> bool:
            row = await run.one(conn, "bench_fan_in_latency", {"batch_id": batch.batch_id})
            return bool(row and row["ms"] is not None)

        await _until(fired, "the fan-in", workers)
        row = await run.one(conn, "bench_fan_in_latency", {"batch_id": batch.batch_id})
    finally:
        workers.stop()
        await conn.close()
    assert row is not None
    if row["callbacks"] != 1 or row["done"] != size:
        raise BenchError(f"expected 1 callback after {size} jobs, got {dict(row)}")
    return {"fan_in_callback_ms": float(row["ms"])}


async def dependency_drain(url: str, total: int, processes: int, concurrency: int) -> float:
    """`total` no-op jobs as total/2 parent → child pairs (children waiting), drained like
    scenarios.drain; returns jobs per second over first claim → last completion."""
    conn = await connect(url, autocommit=True)
    workers = WorkerProcesses(url, PROJECT, QUEUE, concurrency, processes)
    try:
        project_id, queue = await _setup(conn)
        await _prefill(conn, project_id, total // 2)
        await run.execute(conn, "bench_insert_children", {"queue_id": queue.id})
        workers.start()
        await _wait_until_done(conn, queue, total // 2 * 2, workers)
        await _wait_registered(conn, workers, processes)
        row = await run.one(conn, "bench_drain_window", {"queue_id": queue.id})
    finally:
        workers.stop()
        await conn.close()
    assert row is not None
    if row["succeeded"] != total // 2 * 2:
        raise BenchError(f"expected {total} successes, got {row['succeeded']}")
    return float(row["succeeded"] / (row["last_finished"] - row["first_started"]).total_seconds())


FreshDatabase = Callable[[], tuple[str, Callable[[], None]]]
Measure = Callable[[str], Awaitable[dict[str, float]]]


async def measure(fresh: FreshDatabase, sizes: WorkflowSizes) -> dict[str, float]:
    """Every workflow number plus its plain baseline, each on a fresh database (`fresh()`
    gives its URL and the function that drops it)."""
    out: dict[str, float] = {}

    async def pickup(url: str) -> dict[str, float]:
        r = await scenarios.pickup(url, sizes.pickup, sizes.pickup_gap_s, CHAIN_CONCURRENCY)
        return {"pickup_p50_ms": r.p50_ms, "pickup_p99_ms": r.p99_ms}

    async def chain(url: str) -> dict[str, float]:
        return await chain_latency(url, sizes.chain)

    async def fan(url: str) -> dict[str, float]:
        return await fan_in(url, sizes.fan_in, sizes.processes, sizes.drain_concurrency)

    async def plain(url: str) -> dict[str, float]:
        r = await scenarios.drain(url, sizes.drain, sizes.processes, sizes.drain_concurrency)
        return {"plain_drain_per_s": r.per_s}

    async def plain_without_trigger(url: str) -> dict[str, float]:
        conn = await connect(url, autocommit=True)
        try:
            await run.execute(conn, "bench_without_final_effects")
        finally:
            await conn.close()
        r = await scenarios.drain(url, sizes.drain, sizes.processes, sizes.drain_concurrency)
        return {"plain_drain_without_trigger_per_s": r.per_s}

    async def deps(url: str) -> dict[str, float]:
        rate = await dependency_drain(url, sizes.drain, sizes.processes, sizes.drain_concurrency)
        return {"dependency_drain_per_s": rate}

    steps: list[Measure] = [pickup, chain, fan, plain, plain_without_trigger, deps]
    for step in steps:
        url, drop = fresh()
        try:
            out.update(await step(url))
        finally:
            drop()
    out["bookkeeping_us_per_job"] = 1e6 * (
        1 / out["dependency_drain_per_s"] - 1 / out["plain_drain_per_s"]
    )
    out["bookkeeping_pct"] = 100 * (out["plain_drain_per_s"] / out["dependency_drain_per_s"] - 1)
    out["trigger_cost_pct"] = 100 * (
        out["plain_drain_without_trigger_per_s"] / out["plain_drain_per_s"] - 1
    )
    out["chain_vs_pickup_p50"] = out["chain_step_p50_ms"] / out["pickup_p50_ms"]
    out["chain_vs_pickup_p99"] = out["chain_step_p99_ms"] / out["pickup_p99_ms"]
    return out
