"""Run every measurement N times on throwaway databases and keep the median of each number."""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from jobyard.benchmarks import scenarios
from jobyard.benchmarks.scenarios import Progress
from jobyard.db import run, testing
from jobyard.db.pool import connect

CLONE_PREFIX: Final = "jy_bench_"

# The seven numbers `jobyard bench --json` prints, in this order.
JSON_KEYS: Final = (
    "enqueue_single_per_s",
    "enqueue_batch_per_s",
    "drain_1proc_per_s",
    "drain_2proc_per_s",
    "pickup_p50_ms",
    "pickup_p95_ms",
    "pickup_p99_ms",
)


@dataclass(frozen=True)
class Sizes:
    single: int = 2_000
    single_connections: int = 4
    batch: int = 20_000
    drain: int = 20_000
    pickup: int = 200
    pickup_gap_s: float = 0.020
    # Worker --concurrency for the drains: the claim asks for this many jobs at a time.
    drain_concurrency: int = 100
    pickup_concurrency: int = 10


FULL: Final = Sizes()
QUICK: Final = Sizes(single=20, batch=300, drain=300, pickup=5, pickup_gap_s=0.005)


@dataclass
class Report:
    """Every run's numbers by metric name (see METRICS in report.py), plus where they ran."""

    sizes: Sizes
    runs: list[dict[str, float]] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def median(self, metric: str) -> float:
        return statistics.median(r[metric] for r in self.runs)

    def spread(self, metric: str) -> tuple[float, float]:
        values = [r[metric] for r in self.runs]
        return min(values), max(values)

    def json_object(self) -> dict[str, float]:
        return {key: round(self.median(key), 2) for key in JSON_KEYS}


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = int(line.split()[1]) / 1024 / 1024
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count() or 0,
        "memory_gib": round(memory_gib, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


async def server_info(admin_url: str) -> dict[str, Any]:
    conn = await connect(admin_url, autocommit=True)
    try:
        row = await run.one(conn, "bench_server_info")
    finally:
        await conn.close()
    assert row is not None
    return dict(row)


Scenario = Callable[[str], Coroutine[Any, Any, dict[str, float]]]


def scenarios_for(sizes: Sizes) -> list[tuple[str, Scenario]]:
    async def single(url: str) -> dict[str, float]:
        return {"enqueue_single_per_s": await scenarios.enqueue_single(url, sizes.single, 1)}

    async def single_concurrent(url: str) -> dict[str, float]:
        rate = await scenarios.enqueue_single(url, sizes.single, sizes.single_connections)
        return {"enqueue_single_concurrent_per_s": rate}

    async def batch(url: str) -> dict[str, float]:
        return {"enqueue_batch_per_s": await scenarios.enqueue_batches(url, sizes.batch)}

    def drain(processes: int) -> Scenario:
        async def measure(url: str) -> dict[str, float]:
            result = await scenarios.drain(url, sizes.drain, processes, sizes.drain_concurrency)
            return {
                f"drain_{processes}proc_per_s": result.per_s,
                f"drain_{processes}proc_wall_per_s": result.wall_per_s,
            }

        return measure

    async def pickup(url: str) -> dict[str, float]:
        result = await scenarios.pickup(
            url, sizes.pickup, sizes.pickup_gap_s, sizes.pickup_concurrency
        )
        return {
            "pickup_p50_ms": result.p50_ms,
            "pickup_p95_ms": result.p95_ms,
            "pickup_p99_ms": result.p99_ms,
            "pickup_max_ms": result.max_ms,
        }

    return [
        (f"{sizes.single:,} single enqueues on one connection", single),
        (
            f"{sizes.single:,} single enqueues on {sizes.single_connections} connections",
            single_concurrent,
        ),
        (f"{sizes.batch:,} jobs by batch enqueue", batch),
        (f"drain {sizes.drain:,} no-op jobs with 1 worker process", drain(1)),
        (f"drain {sizes.drain:,} no-op jobs with 2 worker processes", drain(2)),
        (f"pickup latency of {sizes.pickup} jobs to an idle worker", pickup),
    ]


def run_bench(
    admin_url: str,
    sizes: Sizes,
    runs: int,
    progress: Progress,
    before_run: Callable[[], None] | None = None,
) -> Report:
    """Run every scenario `runs` times, each in a fresh clone of the migrated template;
    `before_run` (a peer's benchmark, when interleaving) runs before each round."""
    return asyncio.run(_run_bench(admin_url, sizes, runs, progress, before_run))


async def _run_bench(
    admin_url: str,
    sizes: Sizes,
    runs: int,
    progress: Progress,
    before_run: Callable[[], None] | None,
) -> Report:
    report = Report(sizes=sizes, machine=machine_info(), server=await server_info(admin_url))
    template = testing.ensure_template(admin_url)
    plan = scenarios_for(sizes)
    for n in range(1, runs + 1):
        if before_run is not None:
            progress(f"run {n}/{runs}: the peer's benchmark")
            # Off the event loop: it is minutes of another program's work.
            await asyncio.to_thread(before_run)
        numbers: dict[str, float] = {}
        for title, scenario in plan:
            progress(f"run {n}/{runs}: {title}")
            url = testing.create_clone(admin_url, template, CLONE_PREFIX)
            try:
                numbers.update(await scenario(url))
            finally:
                testing.drop_database(admin_url, url)
        report.runs.append(numbers)
    return report
