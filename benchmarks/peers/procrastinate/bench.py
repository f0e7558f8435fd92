"""Procrastinate's side of `jobyard bench`: the same scenarios, Procrastinate's own API and CLI.

Run by run.sh inside the peer venv (procrastinate + psycopg; it never imports jobyard):

    bench.py --url ADMIN_URL --workdir DIR --setup JSON [--runs N] [--quick]

ADMIN_URL is a libpq URL of the peer's server (a superuser); JSON is jobyard's sizes and machine
description. Prints ONE JSON object on stdout under jobyard's metric names (medians of the runs),
with every run under "details". Each scenario runs in a fresh database with Procrastinate's schema
applied by its own schema manager; workers are real `procrastinate worker` processes. Intervals
come from Procrastinate's own event table (`procrastinate_events.at`, the database clock of the
transaction that changed the job), as PgQueuer's come from its log table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import psycopg
from peerlib import (
    BATCH_CAP,
    DRAIN_BUDGET_S,
    POLL_S,
    STALL_TIMEOUT_S,
    BenchError,
    Sizes,
    Workers,
    loadavg,
    result_object,
    say,
)
from proc_app import make_app

HERE: Final = Path(__file__).resolve().parent
# `procrastinate` sits beside the interpreter of the peer venv (not resolved: that leaves the venv).
CLI: Final = str(Path(sys.executable).parent / "procrastinate")
TASK: Final = "noop"
DATABASE_PREFIX: Final = "proc_bench_"


def log(message: str) -> None:
    say("procrastinate", message)


def database_url(admin_url: str, database: str) -> str:
    parts = urlsplit(admin_url)
    return urlunsplit(parts._replace(path=f"/{database}"))


async def fresh_database(admin_url: str, name: str) -> str:
    """(Re)create database `name` with Procrastinate's schema (its own schema manager)."""
    name = DATABASE_PREFIX + name
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as admin:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url(admin_url, name)
    app = make_app(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
    return url


def workers(url: str, processes: int, workdir: Path, concurrency: int) -> Workers:
    # Default verbosity: nothing is logged per job.
    argv = [CLI, "--app", "proc_app.app", "worker", "--concurrency", str(concurrency)]
    return Workers(argv, processes, workdir, {"PROCRASTINATE_BENCH_DSN": url})


async def count(conn: psycopg.AsyncConnection[Any], sql: str) -> int:
    cur = await conn.execute(sql)
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def wait_succeeded(
    conn: psycopg.AsyncConnection[Any],
    expected: int,
    running: Workers,
    budget_s: float | None = None,
) -> int:
    """Poll until `expected` jobs are 'succeeded' (or `budget_s` has passed); how many are."""
    done, last_change = -1, time.monotonic()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    while True:
        await asyncio.sleep(POLL_S)
        running.check_alive()
        n = await count(conn, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
        if n >= expected or (deadline is not None and time.monotonic() > deadline):
            return n
        if n != done:
            done, last_change = n, time.monotonic()
        elif time.monotonic() - last_change > STALL_TIMEOUT_S:
            raise BenchError(f"no job finished for {STALL_TIMEOUT_S:g} s ({n}/{expected})")


async def enqueue_rate(admin_url: str, name: str, total: int, batch: bool) -> float:
    """Jobs per second (host monotonic clock), checked by counting the 'todo' jobs."""
    url = await fresh_database(admin_url, name)
    app = make_app(url)
    async with app.open_async():
        deferrer = app.configure_task(name=TASK)
        started = time.perf_counter()
        if batch:
            for at in range(0, total, BATCH_CAP):
                size = min(BATCH_CAP, total - at)
                await deferrer.batch_defer_async(*({} for _ in range(size)))
        else:
            for _ in range(total):
                await deferrer.defer_async()
        elapsed = time.perf_counter() - started
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        queued = await count(conn, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'")
    if queued != total:
        raise BenchError(f"{name} enqueue: expected {total} queued jobs, found {queued}")
    return total / elapsed


async def drain(admin_url: str, workdir: Path, sizes: Sizes, processes: int) -> dict[str, float]:
    """Prefill, spawn workers; rate = jobs / (last 'succeeded' − first 'started') event, over
    the whole queue or what succeeded within DRAIN_BUDGET_S."""
    total = sizes.drain
    url = await fresh_database(admin_url, f"drain{processes}")
    app = make_app(url)
    async with app.open_async():
        deferrer = app.configure_task(name=TASK)
        for at in range(0, total, BATCH_CAP):
            await deferrer.batch_defer_async(*({} for _ in range(min(BATCH_CAP, total - at))))
    running = workers(url, processes, workdir, sizes.drain_concurrency)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT clock_timestamp()")
        spawned = (await cur.fetchone() or [None])[0]
        running.start()
        try:
            finished = await wait_succeeded(conn, total, running, DRAIN_BUDGET_S)
        finally:
            codes = running.stop()
        cur = await conn.execute(
            """
            SELECT min(at) FILTER (WHERE type = 'started')   AS first_started,
                   max(at) FILTER (WHERE type = 'succeeded') AS last_done,
                   count(*) FILTER (WHERE type = 'started')  AS starts,
                   count(DISTINCT job_id) FILTER (WHERE type = 'succeeded') AS jobs,
                   count(*) FILTER (WHERE type NOT IN ('deferred', 'started', 'succeeded'))
                                                              AS other
            FROM procrastinate_events
            """
        )
        row = await cur.fetchone()
    # Stopped by the budget, the workers may have finished a few more (or left some started).
    if row is None or row[3] < finished or row[2] < row[3] or row[4]:
        raise BenchError(f"drain: expected {finished}+ jobs started once and succeeded, got {row}")
    jobs = int(row[3])
    if any(code != 0 for code in codes):
        log(f"warning: worker exit codes {codes}")
    first_started, last_done = row[0], row[1]
    window = (last_done - first_started).total_seconds()
    wall = (last_done - spawned).total_seconds()
    return {"per_s": jobs / window, "wall_per_s": jobs / wall, "jobs": jobs}


async def pickup(admin_url: str, workdir: Path, sizes: Sizes) -> dict[str, float]:
    """Idle worker, warmed by one job; latency = 'started' − 'deferred' events (database clock)."""
    total = sizes.pickup
    url = await fresh_database(admin_url, "pickup")
    running = workers(url, 1, workdir, sizes.pickup_concurrency)
    app = make_app(url)
    async with (
        app.open_async(),
        await psycopg.AsyncConnection.connect(url, autocommit=True) as conn,
    ):
        deferrer = app.configure_task(name=TASK)
        running.start()
        try:
            # The worker LISTENs before it fetches, so once it has run this job it listens.
            warm_id = await deferrer.defer_async()
            await wait_succeeded(conn, 1, running)
            await asyncio.sleep(0.5)
            for _ in range(total):
                await deferrer.defer_async()
                await asyncio.sleep(sizes.pickup_gap_s)
            await wait_succeeded(conn, total + 1, running)
        finally:
            running.stop()
        cur = await conn.execute(
            """
            WITH lat AS (
                SELECT extract(epoch FROM s.at - d.at) * 1000 AS ms
                FROM procrastinate_events d
                JOIN procrastinate_events s ON s.job_id = d.job_id AND s.type = 'started'
                WHERE d.type = 'deferred' AND d.job_id <> %s
            )
            SELECT count(*),
                   percentile_cont(0.50) WITHIN GROUP (ORDER BY ms),
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY ms),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY ms),
                   max(ms)
            FROM lat
            """,
            (warm_id,),
        )
        row = await cur.fetchone()
    if row is None or row[0] != total:
        raise BenchError(f"pickup: expected {total} jobs, got {row}")
    return dict(zip(("p50", "p95", "p99", "max"), (float(v) for v in row[1:]), strict=True))


async def server_info(admin_url: str) -> dict[str, str]:
    names = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "max_connections")
    async with await psycopg.AsyncConnection.connect(admin_url) as conn:
        info = {}
        for name in names:
            cur = await conn.execute("SELECT current_setting(%s)", (name,))
            info[name] = str((await cur.fetchone() or [""])[0])
        return info


async def one_run(admin_url: str, workdir: Path, sizes: Sizes, prefix: str) -> dict[str, float]:
    """Every scenario once, in jobyard bench's order."""
    numbers: dict[str, float] = {}
    log(f"{prefix}{sizes.single:,} single enqueues (defer_async)")
    numbers["enqueue_single_per_s"] = await enqueue_rate(admin_url, "single", sizes.single, False)
    log(f"{prefix}{sizes.batch:,} jobs by batch_defer_async")
    numbers["enqueue_batch_per_s"] = await enqueue_rate(admin_url, "batch", sizes.batch, True)
    for processes in (1, 2):
        log(f"{prefix}drain {sizes.drain:,} no-op jobs with {processes} worker process(es)")
        result = await drain(admin_url, workdir, sizes, processes)
        numbers[f"drain_{processes}proc_per_s"] = result["per_s"]
        numbers[f"drain_{processes}proc_wall_per_s"] = result["wall_per_s"]
        numbers[f"drain_{processes}proc_jobs"] = result["jobs"]
    log(f"{prefix}pickup latency of {sizes.pickup} jobs to an idle worker")
    latency = await pickup(admin_url, workdir, sizes)
    numbers.update(
        pickup_p50_ms=latency["p50"],
        pickup_p95_ms=latency["p95"],
        pickup_p99_ms=latency["p99"],
        pickup_max_ms=latency["max"],
    )
    return numbers


async def measure(
    admin_url: str, workdir: Path, setup: dict[str, Any], runs: int, quick: bool
) -> dict[str, Any]:
    sizes = Sizes.from_dict(setup["sizes"])
    details: dict[str, Any] = {
        "sizes": asdict(sizes),
        "server": await server_info(admin_url),
        "python": platform.python_version(),
        "psycopg_version": version("psycopg"),
        "loadavg_before": loadavg(),
    }
    every = [
        await one_run(admin_url, workdir, sizes, f"run {n}/{runs}: ") for n in range(1, runs + 1)
    ]
    details["loadavg_after"] = loadavg()
    return result_object(
        every,
        peer="Procrastinate",
        version=version("procrastinate"),
        runs=runs,
        quick=quick,
        machine=setup["machine"],
        harness="benchmarks/peers/procrastinate",
        details=details,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="libpq URL of the peer's server")
    parser.add_argument("--workdir", required=True, type=Path, help="worker logs go here")
    parser.add_argument("--setup", required=True, help="jobyard's sizes and machine, as JSON")
    parser.add_argument("--runs", type=int, default=1, help="repeat; report medians")
    parser.add_argument("--quick", action="store_true", help="the sizes are jobyard's QUICK")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(
            measure(args.url, args.workdir, json.loads(args.setup), args.runs, args.quick)
        )
    except BenchError as exc:
        sys.exit(f"[procrastinate bench] error: {exc}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
