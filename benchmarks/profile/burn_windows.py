"""The burndown, window by window: which statements slow down as a large backlog drains.

    .venv/bin/python benchmarks/profile/burn_windows.py [--jobs 1000000] [--processes 2]
        [--probe-from 0.78] [--probe-to 0.95]

Same server as drain.py (.jobyard/profile/pgdata, with pg_stat_statements and auto_explain:
statements over 60 ms are logged with their plans and buffers to that directory's `log`). Queues
`--jobs` no-op jobs by jobyard's batch insert, as `jobyard bench --scenario burndown` does, starts
`--processes` real `jobyard worker --concurrency 50` processes and prints, every 5 s, the drain
rate and the statements that took more than 200 ms of server time in the window (calls, ms and
buffers per call). Between the two fractions of the backlog drained it also prints what the ready
partitions hold (rows, the jobs' status, the run_at range), the rows of `jobs` that some
transaction holds locked (pgrowlocks) and the oldest snapshots of this database.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any, Final

from drain import DATA_DIR, prefill
from profiling_server import start_with

from jobyard.benchmarks import scenarios
from jobyard.benchmarks.processes import WorkerProcesses
from jobyard.db import embedded, run, testing
from jobyard.db.pool import Conn, connect

SETTINGS: Final = {
    "shared_preload_libraries": "pg_stat_statements, auto_explain",
    "pg_stat_statements.track": "all",
    "auto_explain.log_min_duration": "60ms",
    "auto_explain.log_analyze": "on",
    "auto_explain.log_buffers": "on",
    "auto_explain.log_nested_statements": "on",
    "auto_explain.log_timing": "off",
}
STATEMENTS: Final = """
SELECT queryid, calls, total_exec_time AS ms, shared_blks_hit + shared_blks_read AS buffers,
       regexp_replace(left(query, 60), '\\s+', ' ', 'g') AS query
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"""
READY: Final = """
SELECT r.tableoid::regclass::text AS partition, j.status::text AS status, count(*) AS n,
       min(r.run_at) AS first, max(r.run_at) AS last
FROM job_ready r JOIN jobs j ON j.id = r.job_id GROUP BY 1, 2 ORDER BY 1, 2"""
ROW_LOCKS: Final = """
SELECT modes::text AS modes, multi, count(*) AS n FROM pgrowlocks('jobs') GROUP BY 1, 2"""
SNAPSHOTS: Final = """
SELECT pid, age(backend_xmin) AS xids, now() - xact_start AS held, left(query, 50) AS query
FROM pg_stat_activity
WHERE datname = current_database() AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
ORDER BY age(backend_xmin) DESC LIMIT 3"""

# The workers' VACUUMs of crowded ready partitions (claim.vacuum_ready), for the whole drain.
VACUUMS: Final = """
SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, total_exec_time AS ms,
       max_exec_time AS max_ms
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query ILIKE 'VACUUM%' ORDER BY query"""


def window(now: dict[Any, Any], before: dict[Any, Any]) -> str:
    """The statements that took over 200 ms in the window, the costliest first."""
    costs = []
    for key, s in now.items():
        b = before.get(key, {"calls": 0, "ms": 0.0, "buffers": 0})
        calls, ms = s["calls"] - b["calls"], s["ms"] - b["ms"]
        if ms > 200:
            per = max(calls, 1)
            costs.append(
                (ms, f"{s['query'][:38]!r} {calls} calls {ms / per:.2f} ms "
                     f"{(s['buffers'] - b['buffers']) / per:.0f} buffers")
            )  # fmt: skip
    return " | ".join(text for _, text in sorted(costs, reverse=True)[:4])


async def probe(conn: Conn) -> None:
    ready = await (await conn.execute(READY)).fetchall()
    print("   ready:", [(r["partition"], r["status"], r["n"], f"{r['first']:%H:%M:%S.%f}"[:-3],
                         f"{r['last']:%H:%M:%S.%f}"[:-3]) for r in ready])  # fmt: skip
    print(
        "   row locks on jobs:",
        [tuple(r.values()) for r in await (await conn.execute(ROW_LOCKS)).fetchall()],
    )
    snapshots = await (await conn.execute(SNAPSHOTS)).fetchall()
    held = [(r["pid"], r["xids"], str(r["held"]), r["query"]) for r in snapshots]
    print("   snapshots:", held, flush=True)


async def watch(
    url: str, queue_id: int, args: argparse.Namespace, workers: WorkerProcesses
) -> None:
    conn = await connect(url, autocommit=True)
    before: dict[Any, Any] = {}
    done_before, at_before = 0, time.monotonic()
    try:
        while True:
            await asyncio.sleep(5)
            workers.check_alive()
            progress = await run.one(conn, "bench_queue_progress", {"queue_id": queue_id})
            assert progress is not None
            done = int(progress["done"])
            now = {r["queryid"]: r for r in await (await conn.execute(STATEMENTS)).fetchall()}
            at = time.monotonic()
            rate = (done - done_before) / (at - at_before)
            print(f"done {done:>9,} rate {rate:>7,.0f}/s | {window(now, before)}", flush=True)
            before, done_before, at_before = now, done, at
            if args.probe_from * args.jobs <= done <= args.probe_to * args.jobs:
                await probe(conn)
            if done >= args.jobs:
                for r in await (await conn.execute(VACUUMS)).fetchall():
                    print(f"   {r['query']}: {r['calls']} calls, {r['ms']:.0f} ms in all, "
                          f"longest {r['max_ms']:.0f} ms")  # fmt: skip
                return
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--probe-from", type=float, default=0.78)
    parser.add_argument("--probe-to", type=float, default=0.95)
    args = parser.parse_args()
    admin_url = start_with(DATA_DIR, SETTINGS)
    url = testing.create_clone(admin_url, testing.ensure_template(admin_url), "jy_profile_")
    try:
        queue_id = asyncio.run(
            prefill(url, args.jobs, extensions=("pg_stat_statements", "pgrowlocks"), vacuum=False)
        )
        workers = WorkerProcesses(url, scenarios.PROJECT, scenarios.QUEUE, 50, args.processes)
        workers.start()
        try:
            asyncio.run(watch(url, queue_id, args, workers))
        finally:
            for number, log in enumerate(workers.logs):  # read before stop() closes them
                log.seek(0)
                for line in log.read().decode(errors="replace").splitlines():
                    if "claim position" in line:  # the claim's degraded mode, on and off
                        print(f"   worker {number}: {line[:240]}")
            workers.stop()
    finally:
        testing.drop_database(admin_url, url)
        embedded.stop(DATA_DIR)


if __name__ == "__main__":
    main()
