"""Where the time goes in a 2-process drain: py-spy on one worker, pg_stat_statements, and the
worker backends' wait events sampled from pg_stat_activity (docs/BENCHMARKS.md).

    .venv/bin/python benchmarks/profile/drain.py [--jobs 100000] [--processes 2] [--rate 100]
        [--max-concurrency N] [--gil] [--variant-sql FILE ...]

Starts its own embedded PostgreSQL in .jobyard/profile/pgdata (jobyard's settings, plus
shared_preload_libraries = pg_stat_statements), clones the migrated template, queues `--jobs`
no-op jobs by jobyard's batch insert, starts `--processes` real `jobyard worker --concurrency 100`
processes (the drains' setting), records worker 0 with `py-spy record --format raw` for the whole
drain, and prints markdown: the drain's rate, the top statements by total execution time, the
wait events, and the worker's hottest functions (self and inclusive samples); with the WAL the
drain wrote, per job, in all and by statement (bytes and full-page images), and the CPU a job
cost each side: the worker processes' and all of PostgreSQL's processes' user + system time
from /proc, read while the queue is paused with every worker listening (so the workers' start-up
is not counted) and again when the last job is done. `--gil` records only samples that hold the
GIL: the worker's Python CPU, without the time it waits for a core (on 2 cores a worker that
wakes a backend is often preempted inside the send). py-spy is a pinned dev dependency; it needs
ptrace rights (root, or kernel.yama.ptrace_scope = 0). `--variant-sql FILE` runs FILE on the
drain's database before the prefill: a schema experiment, measured the same way as head (never
a migration; the database is dropped afterwards); given more than once, the files run in order.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

from profiling_server import start_with

from jobyard.benchmarks import scenarios
from jobyard.benchmarks.processes import WorkerProcesses
from jobyard.core import admin, claim, enqueue, projects
from jobyard.db import embedded, run, testing
from jobyard.db.pool import connect, connect_sync
from jobyard.domain import limits
from jobyard.domain.ids import ProjectId, QueueId
from jobyard.domain.schemas import BatchCreate, BatchItem

ROOT: Final = Path(__file__).resolve().parent.parent.parent
DATA_DIR: Final = ROOT / ".jobyard" / "profile" / "pgdata"
OUT: Final = ROOT / ".jobyard" / "profile"


def log(message: str) -> None:
    print(f"[profile] {message}", file=sys.stderr, flush=True)


async def prefill(
    url: str,
    jobs: int,
    *,
    extensions: tuple[str, ...] = ("pg_stat_statements",),
    vacuum: bool = True,
    max_concurrency: int | None = None,
) -> int:
    """Queue `jobs` no-op jobs by jobyard's batch insert; returns the queue's id. With `vacuum`,
    the table is vacuumed and analyzed before the drain (a steady start); without it, the drain
    starts from the state a bulk enqueue leaves, as `jobyard bench --scenario burndown` does.
    With `max_concurrency` the queue gets that limit first, so every claim goes the limited way
    (the queue's lock, the room count in `job_held`, then the claim)."""
    conn = await connect(url, autocommit=True)
    try:
        for extension in extensions:
            await conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
        project_id = await projects.resolve_project(conn, scenarios.PROJECT, create=True)
        await projects.ensure_queues(conn, project_id, [scenarios.QUEUE])
        (queue,) = await claim.queues_by_names(conn, project_id, [scenarios.QUEUE])
        if max_concurrency is not None:
            limit = {"max_concurrency": max_concurrency}
            await admin.update_queue(conn, project_id, queue.id, limit)
        for at in range(0, jobs, limits.MAX_BATCH_SIZE):
            size = min(limits.MAX_BATCH_SIZE, jobs - at)
            batch = BatchCreate(queue=scenarios.QUEUE, jobs=[BatchItem(handler="noop")] * size)
            await enqueue.enqueue_batch(conn, project_id, batch)
        if vacuum:
            await conn.execute("VACUUM ANALYZE jobs")
        if "pg_stat_statements" in extensions:
            await conn.execute("SELECT pg_stat_statements_reset()")
        await conn.execute("SELECT pg_stat_reset_shared('wal')")
        return int(queue.id)
    finally:
        await conn.close()


async def set_paused(url: str, paused: bool) -> None:
    """Pause or resume the benchmark's queue."""
    conn = await connect(url, autocommit=True)
    try:
        project_id = await projects.resolve_project(conn, scenarios.PROJECT, create=False)
        (queue,) = await claim.queues_by_names(conn, project_id, [scenarios.QUEUE])
        await admin.set_queue_paused(conn, ProjectId(project_id), QueueId(queue.id), paused)
    finally:
        await conn.close()


async def wait_listening(url: str, processes: int) -> None:
    """Until every worker process has its LISTEN connection up (they are then idle)."""
    conn = await connect(url, autocommit=True)
    try:
        while True:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
            )
            row = await cur.fetchone()
            if row is not None and int(row["n"]) >= processes:
                return
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


TICKS: Final = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User + system CPU of a process (all its threads), and with `children` that of its
    children it has waited for (a postmaster reaps every backend and autovacuum worker)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # After the command: state is field 3, utime/stime are 14/15, cutime/cstime 16/17.
    used = int(fields[11]) + int(fields[12])
    if children:
        used += int(fields[13]) + int(fields[14])
    return used / TICKS


def server_cpu_seconds(data_dir: Path) -> float:
    """CPU of the whole PostgreSQL server: the postmaster with its reaped children, and every
    live child (backends, WAL writer, checkpointer, autovacuum)."""
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    total = cpu_seconds(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rpartition(")")[2].split()[1]) == postmaster:
                total += cpu_seconds(int(entry.name))
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited between the listing and the read: now in the postmaster's
    return total


async def watch(url: str, queue_id: int, jobs: int, workers: WorkerProcesses) -> dict[str, Any]:
    """Sample the workers' wait events every 10 ms until the queue is drained (checked once a
    second: the check is a count over the queue's jobs, tens of milliseconds at 100,000)."""
    conn = await connect(url, autocommit=True)
    waits: collections.Counter[str] = collections.Counter()
    try:
        while True:
            for _ in range(100):
                await asyncio.sleep(0.01)
                cur = await conn.execute(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, state) AS w"
                    " FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    " AND query NOT LIKE 'LISTEN%%'"
                )
                for row in await cur.fetchall():
                    waits[str(row["w"])] += 1
            workers.check_alive()
            progress = await run.one(conn, "bench_queue_progress", {"queue_id": queue_id})
            assert progress is not None
            if progress["done"] >= jobs:
                break
        window = await run.one(conn, "bench_drain_window", {"queue_id": queue_id})
        assert window is not None
        cur = await conn.execute(
            "SELECT calls, round(total_exec_time::numeric, 1) AS total_ms,"
            " round(mean_exec_time::numeric, 3) AS mean_ms, rows, wal_bytes, wal_fpi,"
            " regexp_replace(left(query, 90), '\\s+', ' ', 'g') AS query"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database()) ORDER BY total_exec_time DESC LIMIT 12"
        )
        statements = await cur.fetchall()
        # The whole server's WAL since the prefill (pg_stat_wal was reset with the statements):
        # what the drain writes, triggers and autovacuum included.
        cur = await conn.execute("SELECT wal_bytes, wal_fpi FROM pg_stat_wal")
        wal = await cur.fetchone()
        # The workers' backends report their counters within a second of their last statement.
        await asyncio.sleep(1.5)
        cur = await conn.execute(
            "SELECT n_tup_upd AS updates, n_tup_hot_upd AS hot,"
            " pg_relation_size(relid) AS heap, pg_indexes_size(relid) AS indexes"
            " FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass"
        )
        updates = await cur.fetchone()
        return {
            "window": dict(window),
            "waits": waits,
            "statements": statements,
            "wal": wal,
            "updates": updates,
        }
    finally:
        await conn.close()


def hot_functions(raw: Path, top: int) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """From py-spy's raw (collapsed) stacks: total samples, top self and inclusive frames."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [f.split(" (")[0] + " (" + f.split("/")[-1] for f in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    return total, own.most_common(top), inclusive.most_common(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--gil", action="store_true", help="py-spy: only samples that hold the GIL")
    parser.add_argument(
        "--variant-sql",
        type=Path,
        action="append",
        default=[],
        help="SQL run on the database before the prefill (repeat: run in order)",
    )
    parser.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="give the queue this limit (the limited claim path)",
    )
    args = parser.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    admin_url = start_with(
        DATA_DIR,
        {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"},
    )
    template = testing.ensure_template(admin_url)
    url = testing.create_clone(admin_url, template, "jy_profile_")
    try:
        for variant in args.variant_sql:
            log(f"applying {variant}")
            with connect_sync(url, autocommit=True) as conn:
                conn.execute(variant.read_text(encoding="utf-8").encode())
        log(f"queueing {args.jobs:,} no-op jobs")
        queue_id = asyncio.run(prefill(url, args.jobs, max_concurrency=args.max_concurrency))
        asyncio.run(set_paused(url, paused=True))
        workers = WorkerProcesses(url, scenarios.PROJECT, scenarios.QUEUE, 100, args.processes)
        workers.start()
        asyncio.run(wait_listening(url, args.processes))
        time.sleep(1.0)  # the pools fill and the first (empty) claims run
        raw = OUT / "worker0.raw"
        spy = subprocess.Popen(  # noqa: S603 - our own profiler
            [
                pyspy,
                "record",
                "--pid",
                str(workers.procs[0].pid),
                "--rate",
                str(args.rate),
                "--format",
                "raw",
                "--output",
                str(raw),
                "--nonblocking",
                *(["--gil"] if args.gil else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        log(f"draining with {args.processes} worker processes, py-spy on worker 0")
        try:
            cpu_before = [cpu_seconds(p.pid) for p in workers.procs], server_cpu_seconds(DATA_DIR)
            asyncio.run(set_paused(url, paused=False))
            seen = asyncio.run(watch(url, queue_id, args.jobs, workers))
            cpu_after = [cpu_seconds(p.pid) for p in workers.procs], server_cpu_seconds(DATA_DIR)
        finally:
            workers.stop()
            spy.wait(timeout=60)
    finally:
        testing.drop_database(admin_url, url)
        embedded.stop(DATA_DIR)
    w = seen["window"]
    elapsed = (w["last_finished"] - w["first_started"]).total_seconds()
    print(
        f"Drain of {args.jobs:,} jobs, {args.processes} processes"
        + (f", queue limited to {args.max_concurrency}" if args.max_concurrency else "")
        + f": {args.jobs / elapsed:,.0f} "
        f"jobs/s ({elapsed:.1f} s, load average {Path('/proc/loadavg').read_text().split()[0]})\n"
    )
    worker_us = 1e6 * (sum(cpu_after[0]) - sum(cpu_before[0])) / args.jobs
    server_us = 1e6 * (cpu_after[1] - cpu_before[1]) / args.jobs
    print(
        f"CPU a job (/proc, user + system): worker processes {worker_us:.1f} µs, "
        f"PostgreSQL {server_us:.1f} µs (the sampling connection included)\n"
    )
    wal = seen["wal"]
    print(
        f"WAL written during the drain: {int(wal['wal_bytes']) / args.jobs:,.0f} bytes and "
        f"{int(wal['wal_fpi']) / args.jobs:.2f} full-page images per job\n"
    )
    updates = seen["updates"]
    print(
        f"Updates of jobs: {int(updates['updates']):,}, of them HOT {int(updates['hot']):,} "
        f"({100 * int(updates['hot']) / max(1, int(updates['updates'])):.0f} %); jobs is "
        f"{int(updates['heap']) / 2**20:,.1f} MB of heap and {int(updates['indexes']) / 2**20:,.1f}"
        " MB of indexes after the drain\n"
    )
    print(
        "| calls | total ms | mean ms | rows | WAL bytes / job | FPI / job | statement |\n"
        "|---|---|---|---|---|---|---|"
    )
    for s in seen["statements"]:
        print(
            f"| {s['calls']:,} | {s['total_ms']:,} | {s['mean_ms']} | {s['rows']:,} | "
            f"{int(s['wal_bytes']) / args.jobs:,.0f} | {int(s['wal_fpi']) / args.jobs:.2f} | "
            f"`{s['query']}` |"
        )
    waits: collections.Counter[str] = seen["waits"]
    n = sum(waits.values())
    print("\n| worker backends' state (pg_stat_activity samples) | share |\n|---|---|")
    for name, count in waits.most_common(10):
        print(f"| {name} | {100 * count / n:.1f} % |")
    if raw.exists():
        total, own, inclusive = hot_functions(raw, 15)
        print(f"\npy-spy, worker 0, {total:,} samples\n\n| self | function |\n|---|---|")
        for name, count in own:
            print(f"| {100 * count / total:.1f} % | `{name}` |")
        print("\n| inclusive | function |\n|---|---|")
        for name, count in inclusive:
            print(f"| {100 * count / total:.1f} % | `{name}` |")
    else:
        print(f"\n(py-spy wrote nothing: {spy.stderr.read().decode() if spy.stderr else ''})")


if __name__ == "__main__":
    main()
