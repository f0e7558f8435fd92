"""What a drained job costs in CPU, on each side, for jobyard and for PgQueuer: in turns on one
embedded PostgreSQL, the worker processes' and the whole server's CPU over the middle of a drain.

    .venv/bin/python benchmarks/profile/cpu_split.py [--jobs 100000] [--turns 3]

Needs `make install` and PgQueuer's peer venv (`benchmarks/peers/pgqueuer/run.sh` builds it).
Each turn drains `--jobs` no-op jobs once with jobyard (`jobyard worker --concurrency 100`, 2
processes, jobs by jobyard's batch insert) and once with PgQueuer 1.6 (`pgq run` with the peer
benchmark's settings: batch size 50, 100 concurrent tasks, 2 processes, jobs by its list
enqueue), the order alternating, each in a fresh database of its own server,
`.jobyard/profile/cpu-pgdata` (jobyard's settings), with a CHECKPOINT between the prefill and
the drain.

The window: from the moment a quarter of the jobs have finished to three quarters (read from
the tables' statistics counters, which cost nothing), so neither the workers' start-up nor the
drain's tail is in it. At both ends the script reads, within a millisecond, the user + system
CPU of every worker process and of every PostgreSQL process (`/proc`; the server's reaped
children included), and the database clock. Afterwards it counts the jobs each queue logged as
finished between the two clock readings. It prints, per turn and as medians: the window's rate,
the workers' CPU per job, PostgreSQL's CPU per job, and their sum; on 2 cores, 2,000,000 µs of
CPU a second divided by that sum is the rate at which both cores would be busy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from drain import cpu_seconds, prefill, server_cpu_seconds
from profiling_server import start_with

from jobyard.benchmarks import scenarios
from jobyard.benchmarks.processes import WorkerProcesses
from jobyard.db import embedded, testing
from jobyard.db.pool import Conn, connect, connect_sync

ROOT: Final = Path(__file__).resolve().parent.parent.parent
DATA_DIR: Final = ROOT / ".jobyard" / "profile" / "cpu-pgdata"
PEER: Final = ROOT / "benchmarks" / "peers" / "pgqueuer"
PEER_VENV: Final = ROOT / ".jobyard" / "peers" / "pgqueuer" / "venv"
WORKDIR: Final = ROOT / ".jobyard" / "profile" / "cpu-pgqueuer"
PROCESSES: Final = 2
CONCURRENCY: Final = 100
PGQ_BATCH: Final = 50  # benchmarks/peers/pgqueuer/bench.py DRAIN_BATCH


def log(message: str) -> None:
    print(f"[cpu_split] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Side:
    """How one queue is drained and read: its workers, a progress counter, the window's jobs."""

    name: str
    start_workers: Callable[[str], list[subprocess.Popen[bytes]]]
    progress_sql: str  # finished jobs so far, from statistics counters (cheap, ~1 s behind)
    window_sql: str  # jobs finished between %(t1)s and %(t2)s, from the queue's own records


@dataclass(frozen=True)
class Sample:
    workers_s: float
    server_s: float
    at: datetime  # the database clock


@dataclass(frozen=True)
class Turn:
    side: str
    jobs: int
    seconds: float
    worker_us: float
    server_us: float


def _jobyard_workers(url: str) -> list[subprocess.Popen[bytes]]:
    workers = WorkerProcesses(url, scenarios.PROJECT, scenarios.QUEUE, CONCURRENCY, PROCESSES)
    workers.start()
    return workers.procs


def _pgqueuer_workers(url: str) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PGQ_BENCH_DSN": url, "PYTHONPATH": str(PEER)}
    argv = [str(PEER_VENV / "bin" / "pgq"), "run", "pgq_worker:create"]
    argv += ["--batch-size", str(PGQ_BATCH), "--max-concurrent-tasks", str(CONCURRENCY)]
    return [
        subprocess.Popen(  # noqa: S603 - the peer's own CLI
            argv,
            cwd=WORKDIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(PROCESSES)
    ]


JOBYARD: Final = Side(
    name="jobyard",
    start_workers=_jobyard_workers,
    progress_sql="SELECT n_tup_ins AS n FROM pg_stat_user_tables WHERE relname = 'job_executions'",
    window_sql="SELECT count(*) AS n FROM job_executions"
    " WHERE finished_at > %(t1)s AND finished_at <= %(t2)s",
)
PGQUEUER: Final = Side(
    name="PgQueuer",
    start_workers=_pgqueuer_workers,
    progress_sql="SELECT n_tup_del AS n FROM pg_stat_user_tables WHERE relname = 'pgqueuer'",
    window_sql="SELECT count(*) AS n FROM pgqueuer_log WHERE status = 'successful'"
    " AND created > %(t1)s AND created <= %(t2)s",
)


def _pgqueuer_database(admin_url: str) -> str:
    """A fresh database with PgQueuer's schema (`pgq install`) and `jobs` queued no-op jobs by
    the peer benchmark's own list enqueue (run in the peer venv: it never imports jobyard)."""
    url = testing.create_clone(admin_url, "template0", prefix="cpu_pgq_")
    pgq = str(PEER_VENV / "bin" / "pgq")
    subprocess.run([pgq, "--pg-dsn", url, "install"], check=True, capture_output=True, cwd=WORKDIR)  # noqa: S603
    return url


def _pgqueuer_prefill(url: str, jobs: int) -> None:
    code = (
        "import asyncio, sys\n"
        "import bench\n"
        "async def main():\n"
        "    conn, queries = await bench.connect(sys.argv[1])\n"
        "    await bench.enqueue_lists(queries, int(sys.argv[2]))\n"
        "    await conn.close()\n"
        "asyncio.run(main())\n"
    )
    subprocess.run(  # noqa: S603 - the peer venv's interpreter
        [str(PEER_VENV / "bin" / "python"), "-c", code, url, str(jobs)],
        check=True,
        cwd=PEER,
        env={**os.environ, "PYTHONPATH": str(PEER)},
    )


async def _sample(conn: Conn, procs: list[subprocess.Popen[bytes]]) -> Sample:
    cur = await conn.execute("SELECT clock_timestamp() AS at")
    row = await cur.fetchone()
    assert row is not None
    return Sample(
        workers_s=sum(cpu_seconds(p.pid, children=True) for p in procs),
        server_s=server_cpu_seconds(DATA_DIR),
        at=row["at"],
    )


async def _count(conn: Conn, query: str, params: dict[str, object] | None = None) -> int:
    cur = await conn.execute(query, params)
    row = await cur.fetchone()
    return 0 if row is None or row["n"] is None else int(row["n"])


async def _wait_for(
    conn: Conn, side: Side, target: int, procs: list[subprocess.Popen[bytes]]
) -> None:
    deadline = time.monotonic() + 600
    while await _count(conn, side.progress_sql) < target:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a {side.name} worker exited early")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{side.name}: no progress to {target} in 10 minutes")
        await asyncio.sleep(0.05)


async def drain(side: Side, url: str, jobs: int) -> Turn:
    conn = await connect(url, autocommit=True)
    procs = side.start_workers(url)
    try:
        await _wait_for(conn, side, jobs // 4, procs)
        first = await _sample(conn, procs)
        await _wait_for(conn, side, 3 * jobs // 4, procs)
        last = await _sample(conn, procs)
        await _wait_for(conn, side, jobs, procs)
        # The statistics run up to a second behind: the window's jobs come from the records.
        await asyncio.sleep(1.5)
        done = await _count(conn, side.window_sql, {"t1": first.at, "t2": last.at})
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        await conn.close()
    return Turn(
        side=side.name,
        jobs=done,
        seconds=(last.at - first.at).total_seconds(),
        worker_us=1e6 * (last.workers_s - first.workers_s) / done,
        server_us=1e6 * (last.server_s - first.server_s) / done,
    )


def one_turn(side: Side, admin_url: str, template: str, jobs: int) -> Turn:
    if side is JOBYARD:
        url = testing.create_clone(admin_url, template, "cpu_jy_")
        asyncio.run(prefill(url, jobs, extensions=(), vacuum=False))
    else:
        url = _pgqueuer_database(admin_url)
        _pgqueuer_prefill(url, jobs)
    # Neither drain starts owing a checkpoint to the other's writes (full-page images after
    # one are a large part of a drain's WAL and CPU).
    with connect_sync(admin_url, autocommit=True) as admin:
        admin.execute("CHECKPOINT")
    try:
        log(f"{side.name}: draining {jobs:,} jobs with {PROCESSES} processes")
        return asyncio.run(drain(side, url, jobs))
    finally:
        testing.drop_database(admin_url, url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    if not (PEER_VENV / "bin" / "pgq").exists():
        sys.exit("PgQueuer's venv is missing: run benchmarks/peers/pgqueuer/run.sh --quick once")
    WORKDIR.mkdir(parents=True, exist_ok=True)
    admin_url = start_with(DATA_DIR, {})
    template = testing.ensure_template(admin_url)
    turns: list[Turn] = []
    try:
        for t in range(args.turns):
            order = (JOBYARD, PGQUEUER) if t % 2 == 0 else (PGQUEUER, JOBYARD)
            for side in order:
                turns.append(one_turn(side, admin_url, template, args.jobs))
                r = turns[-1]
                log(
                    f"turn {t + 1}: {r.side} {r.jobs / r.seconds:,.0f} jobs/s, workers "
                    f"{r.worker_us:.1f} µs, PostgreSQL {r.server_us:.1f} µs a job"
                )
    finally:
        embedded.stop(DATA_DIR)
    print(
        f"CPU a job over the middle half of a {args.jobs:,}-job drain, {PROCESSES} processes, "
        f"{args.turns} turns (load average {Path('/proc/loadavg').read_text().split()[0]})\n"
    )
    print("| queue | turn | window rate | workers µs/job | PostgreSQL µs/job | sum |")
    print("|---|---:|---:|---:|---:|---:|")
    for i, r in enumerate(turns):
        print(
            f"| {r.side} | {i // 2 + 1} | {r.jobs / r.seconds:,.0f} /s | {r.worker_us:.1f} "
            f"| {r.server_us:.1f} | {r.worker_us + r.server_us:.1f} |"
        )
    print("\n| queue (medians) | window rate | workers µs/job | PostgreSQL µs/job | sum |")
    print("|---|---:|---:|---:|---:|")
    for name in (JOBYARD.name, PGQUEUER.name):
        mine = [r for r in turns if r.side == name]
        rate = statistics.median(r.jobs / r.seconds for r in mine)
        w = statistics.median(r.worker_us for r in mine)
        s = statistics.median(r.server_us for r in mine)
        total = statistics.median(r.worker_us + r.server_us for r in mine)
        print(f"| {name} | {rate:,.0f} /s | {w:.1f} | {s:.1f} | {total:.1f} |")


if __name__ == "__main__":
    main()
