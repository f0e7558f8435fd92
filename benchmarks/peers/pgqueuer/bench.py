"""PgQueuer's side of `jobyard bench`: the same four scenarios, PgQueuer's own API and CLI.

Run by run.sh inside the peer venv (pgqueuer + asyncpg; it never imports jobyard):

    bench.py --url ADMIN_URL --workdir DIR --setup JSON [--runs N] [--quick]

ADMIN_URL is a libpq URL of the peer's server (a superuser; databases are created on it). JSON
is jobyard's sizes and machine description (run.sh reads them from jobyard's harness).
Prints ONE JSON object on stdout: the seven numbers `jobyard bench --json` prints (same keys,
same meaning, medians of the runs), three more under jobyard's metric names (from-spawn drains,
pickup max), then where they came from and, under "details", every run.
Progress goes to stderr; each worker process logs to DIR/worker-N.log.

Each scenario runs in a fresh database with PgQueuer's schema installed by its own CLI
(`pgq install`, default durability: logged tables). See benchmarks/peers/README.md for how each
number is taken and how it differs from jobyard's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import IO, Any, Final
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.queries import Queries

HERE: Final = Path(__file__).resolve().parent
# `pgq` sits beside the interpreter of the peer venv (not resolved: that would leave the venv).
PGQ: Final = str(Path(sys.executable).parent / "pgq")
ENTRYPOINT: Final = "noop"
BATCH_CAP: Final = 10_000  # jobs per list enqueue: jobyard's batch cap
POLL_S: Final = 1.0  # progress polling only; intervals are read from the database clock
STALL_TIMEOUT_S: Final = 60.0
DATABASE_PREFIX: Final = "pgq_bench_"

# Jobs per dequeue (`pgq run --batch-size`). jobyard claims as many as it has free slots.
DRAIN_BATCH: Final = 50


@dataclass(frozen=True)
class Sizes:
    """jobyard's sizes (harness.FULL or QUICK), handed over by run.sh so that they never drift."""

    single: int
    batch: int
    drain: int
    pickup: int
    pickup_gap_s: float
    # `pgq run --max-concurrent-tasks` for the drains: jobyard's `worker --concurrency`.
    drain_concurrency: int
    # `pgq run --batch-size` of the pickup worker: jobyard's pickup `--concurrency`.
    pickup_concurrency: int

    @classmethod
    def from_dict(cls, given: dict[str, Any]) -> Sizes:
        return cls(**{f.name: given[f.name] for f in fields(cls)})


class BenchError(RuntimeError):
    pass


def log(message: str) -> None:
    print(f"[pgqueuer bench] {message}", file=sys.stderr, flush=True)


def database_url(admin_url: str, database: str) -> str:
    """`admin_url` pointing at another database (host, port and user kept)."""
    parts = urlsplit(admin_url)
    return urlunsplit(parts._replace(path=f"/{database}"))


class Bench:
    def __init__(self, admin_url: str, workdir: Path) -> None:
        self.admin_url = admin_url
        self.workdir = workdir

    async def fresh_database(self, name: str) -> str:
        """(Re)create database `name` and install PgQueuer's schema with `pgq install`."""
        name = DATABASE_PREFIX + name
        admin = await asyncpg.connect(self.admin_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        url = database_url(self.admin_url, name)
        proc = await asyncio.create_subprocess_exec(
            PGQ,
            "--pg-dsn",
            url,
            "install",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=self.workdir,
        )
        output, _ = await proc.communicate()
        if proc.returncode != 0:
            raise BenchError(f"pgq install failed: {output.decode(errors='replace')}")
        return url

    def workers(self, url: str, processes: int, args: list[str]) -> Workers:
        return Workers(url, processes, args, self.workdir)


class Workers:
    """`pgq run pgq_worker:create ...` processes: the CLI a PgQueuer user runs."""

    def __init__(self, url: str, processes: int, args: list[str], workdir: Path) -> None:
        self.url, self.processes, self.args, self.workdir = url, processes, args, workdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[IO[bytes]] = []

    def log_path(self, i: int) -> Path:
        return self.workdir / f"worker-{i}.log"

    def start(self) -> None:
        # pgq_worker.py is importable from here, whatever the working directory.
        path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PGQ_BENCH_DSN": self.url, "PYTHONPATH": path}
        argv = [PGQ, "run", "pgq_worker:create", *self.args]
        for i in range(self.processes):
            # Default log level (INFO): nothing is logged per job.
            logf = self.log_path(i).open("wb")
            self.logs.append(logf)
            self.procs.append(
                subprocess.Popen(  # noqa: S603 (our own argv)
                    argv,
                    cwd=self.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=logf,
                )
            )

    def check_alive(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise BenchError(
                    f"worker {i} exited early with {proc.returncode}; see {self.log_path(i)}"
                )

    def stop(self) -> list[int]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=30))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        for logf in self.logs:
            logf.close()
        return codes


async def connect(url: str) -> tuple[asyncpg.Connection, Queries]:
    conn = await asyncpg.connect(url)
    return conn, Queries(AsyncpgDriver(conn))


async def enqueue_lists(queries: Queries, total: int) -> None:
    """`total` no-op jobs by the list form of `Queries.enqueue`, at most BATCH_CAP per call."""
    for at in range(0, total, BATCH_CAP):
        size = min(BATCH_CAP, total - at)
        await queries.enqueue([ENTRYPOINT] * size, [None] * size, [0] * size)


async def wait_successful(conn: asyncpg.Connection, expected: int, workers: Workers) -> None:
    """Poll PgQueuer's log table until `expected` jobs are logged 'successful'."""
    done, last_change = -1, time.monotonic()
    while True:
        await asyncio.sleep(POLL_S)
        workers.check_alive()
        n = await conn.fetchval("SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")
        if n >= expected:
            return
        if n != done:
            done, last_change = n, time.monotonic()
        elif time.monotonic() - last_change > STALL_TIMEOUT_S:
            raise BenchError(f"no job finished for {STALL_TIMEOUT_S:g} s ({n}/{expected})")


# ----------------------------------------------------------------------------- scenarios


async def enqueue_rate(
    bench: Bench, name: str, total: int, enqueue: Callable[[Queries], Awaitable[None]]
) -> float:
    """Jobs per second of `enqueue` (host monotonic clock), checked by counting queued jobs."""
    conn, queries = await connect(await bench.fresh_database(name))
    try:
        started = time.perf_counter()
        await enqueue(queries)
        elapsed = time.perf_counter() - started
        queued: int = await conn.fetchval("SELECT count(*) FROM pgqueuer WHERE status = 'queued'")
    finally:
        await conn.close()
    if queued != total:
        raise BenchError(f"{name} enqueue: expected {total} queued jobs, found {queued}")
    return total / elapsed


async def enqueue_single(bench: Bench, total: int) -> float:
    """`total` sequential `Queries.enqueue(...)` on one connection, each its own transaction."""

    async def one_by_one(queries: Queries) -> None:
        for _ in range(total):
            await queries.enqueue(ENTRYPOINT, None)

    return await enqueue_rate(bench, "single", total, one_by_one)


async def enqueue_batch(bench: Bench, total: int) -> float:
    """`total` jobs by list enqueue; host clock from building the lists to the last return."""
    return await enqueue_rate(bench, "batch", total, lambda queries: enqueue_lists(queries, total))


async def drain(bench: Bench, sizes: Sizes, processes: int) -> dict[str, float]:
    """Prefill, spawn workers, rate = jobs / (last 'successful' − first 'picked') in the log."""
    total = sizes.drain
    url = await bench.fresh_database(f"drain{processes}")
    conn, queries = await connect(url)
    args = ["--batch-size", str(DRAIN_BATCH)]
    args += ["--max-concurrent-tasks", str(sizes.drain_concurrency)]
    workers = bench.workers(url, processes, args)
    try:
        await enqueue_lists(queries, total)
        spawned = await conn.fetchval("SELECT clock_timestamp()")
        workers.start()
        await wait_successful(conn, total, workers)
        row = await conn.fetchrow(
            """
            SELECT min(created) FILTER (WHERE status = 'picked')     AS first_picked,
                   max(created) FILTER (WHERE status = 'successful') AS last_done,
                   count(*)     FILTER (WHERE status = 'picked')     AS picks,
                   count(DISTINCT job_id) FILTER (WHERE status = 'successful') AS jobs,
                   count(*)     FILTER (WHERE status NOT IN ('queued', 'picked', 'successful'))
                                                                     AS other
            FROM pgqueuer_log
            """
        )
        left = await conn.fetchval("SELECT count(*) FROM pgqueuer")
    finally:
        codes = workers.stop()
        await conn.close()
    if row is None or row["jobs"] != total or row["picks"] != total or row["other"] or left:
        raise BenchError(
            f"drain: expected {total} jobs picked once and successful, got "
            f"{dict(row) if row else None}, {left} rows left in pgqueuer"
        )
    if any(code != 0 for code in codes):
        log(f"warning: worker exit codes {codes}")
    window = (row["last_done"] - row["first_picked"]).total_seconds()
    wall = (row["last_done"] - spawned).total_seconds()
    return {"per_s": total / window, "window_s": window, "wall_per_s": total / wall}


async def pickup(bench: Bench, sizes: Sizes) -> dict[str, float]:
    """Idle worker, warmed by one job; latency = 'picked' − 'queued' log rows (database clock)."""
    total = sizes.pickup
    url = await bench.fresh_database("pickup")
    conn, queries = await connect(url)
    workers = bench.workers(url, 1, ["--batch-size", str(sizes.pickup_concurrency)])
    try:
        workers.start()
        # The worker LISTENs before its first dequeue, so once it has finished this job it is
        # listening and idle.
        (warm_id,) = await queries.enqueue(ENTRYPOINT, None)
        await wait_successful(conn, 1, workers)
        await asyncio.sleep(0.5)
        for _ in range(total):
            await queries.enqueue(ENTRYPOINT, None)
            await asyncio.sleep(sizes.pickup_gap_s)
        await wait_successful(conn, total + 1, workers)
        row = await conn.fetchrow(
            """
            WITH lat AS (
                SELECT extract(epoch FROM p.created - qd.created) * 1000 AS ms
                FROM pgqueuer_log qd
                JOIN LATERAL (SELECT min(created) AS created FROM pgqueuer_log p
                              WHERE p.job_id = qd.job_id AND p.status = 'picked') p ON TRUE
                WHERE qd.status = 'queued' AND qd.job_id <> $1
            )
            SELECT count(*) AS jobs, count(ms) AS picked,
                   percentile_cont(0.50) WITHIN GROUP (ORDER BY ms) AS p50,
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) AS p95,
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99,
                   max(ms) AS max
            FROM lat
            """,
            warm_id,
        )
    finally:
        workers.stop()
        await conn.close()
    if row is None or row["jobs"] != total or row["picked"] != total:
        raise BenchError(f"pickup: expected {total} jobs, got {dict(row) if row else None}")
    return {key: float(row[key]) for key in ("p50", "p95", "p99", "max")}


async def server_info(admin_url: str) -> dict[str, str]:
    names = (
        "server_version",
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "wal_sync_method",
        "shared_buffers",
        "max_connections",
        "jit",
    )
    conn = await asyncpg.connect(admin_url)
    try:
        return {name: await conn.fetchval("SELECT current_setting($1)", name) for name in names}
    finally:
        await conn.close()


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text(encoding="utf-8").strip()
    except OSError:
        return "unknown"


async def one_run(bench: Bench, sizes: Sizes, prefix: str) -> dict[str, float]:
    """Every scenario once, in jobyard bench's order."""
    numbers: dict[str, float] = {}
    log(f"{prefix}{sizes.single:,} single enqueues on one connection")
    numbers["enqueue_single_per_s"] = await enqueue_single(bench, sizes.single)
    log(f"{prefix}{sizes.batch:,} jobs by batch enqueue")
    numbers["enqueue_batch_per_s"] = await enqueue_batch(bench, sizes.batch)
    for processes in (1, 2):
        log(f"{prefix}drain {sizes.drain:,} no-op jobs with {processes} worker process(es)")
        result = await drain(bench, sizes, processes)
        numbers[f"drain_{processes}proc_per_s"] = result["per_s"]
        numbers[f"drain_{processes}proc_wall_per_s"] = result["wall_per_s"]
    log(f"{prefix}pickup latency of {sizes.pickup} jobs to an idle worker")
    latency = await pickup(bench, sizes)
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
    """`runs` runs; the median of each number (as `jobyard bench`), each run in the details."""
    sizes, machine = Sizes.from_dict(setup["sizes"]), setup["machine"]
    bench = Bench(admin_url, workdir)
    details: dict[str, Any] = {
        "sizes": asdict(sizes),
        "drain_batch_size": DRAIN_BATCH,
        "server": await server_info(admin_url),
        "python": platform.python_version(),
        "asyncpg_version": version("asyncpg"),
        "typer_version": version("typer"),
        "uvloop_version": version("uvloop"),
        "loadavg_before": loadavg(),
    }
    every = [await one_run(bench, sizes, f"run {n}/{runs}: ") for n in range(1, runs + 1)]
    details["loadavg_after"] = loadavg()
    details["runs"] = [{key: round(value, 2) for key, value in run.items()} for run in every]

    # Keys are jobyard's metric names (report.METRICS); `jobyard bench --reference` checks them.
    result_object: dict[str, Any] = {
        key: round(statistics.median(run[key] for run in every), 2) for key in every[0]
    }
    result_object.update(
        peer="PgQueuer",
        version=version("pgqueuer"),
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        runs=runs,
        quick=quick,
        machine=machine,
        harness="benchmarks/peers/pgqueuer",
        details=details,
    )
    return result_object


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="libpq URL of the peer's server")
    parser.add_argument("--workdir", required=True, type=Path, help="worker logs go here")
    parser.add_argument(
        "--setup", required=True, help='{"sizes": jobyard\'s Sizes, "machine": its machine_info}'
    )
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
        sys.exit(f"[pgqueuer bench] error: {exc}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
