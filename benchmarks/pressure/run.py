"""Pickup latency while a snapshot is held: jobs offered at a fixed rate to worker processes, then
one idle transaction holds an XID, then it ends (docs/DATABASE.md, "The ready set").

    .venv/bin/python benchmarks/pressure/run.py [--rate 800] [--workers 2] [--concurrency 50]
        [--before-s 60] [--hold-s 180] [--after-s 60] [--window-s 30]

One throwaway database cloned from the migrated template of the code on PYTHONPATH (so the same
script measures another checkout: PYTHONPATH=/tmp/base/src). Jobs are offered on the wall clock
(every 10 ms, what is due since the start: a slow round is made up, never lost) in batches of the
`noop` handler. Per window it prints completions per second, pickup p50/p99 (the claim's
started_at minus created_at, both by the database clock, of the jobs finished in the window),
the shared buffers of one EXPLAIN (ANALYZE, BUFFERS) of the claim's picking step (n = 10, rolled
back: the dead entries it walks, which the machine's load does not blur), jobs' dead tuples and
the sizes of the claim's relations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from jobyard.benchmarks.processes import WorkerProcesses
from jobyard.core import claim, enqueue, projects
from jobyard.db import testing
from jobyard.db.pool import Conn, connect
from jobyard.db.queries import QUERIES
from jobyard.domain.schemas import BatchCreate, BatchItem

PROJECT = "bench/pressure"
QUEUE = "pressure"
TICK_S = 0.01

WINDOW = """
SELECT count(*) AS done,
       percentile_cont(0.50) WITHIN GROUP (ORDER BY ms) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99
FROM (SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms
      FROM jobs WHERE finished_at >= %(t0)s AND finished_at < %(t1)s) AS w
"""

SIZES = """
SELECT (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs') AS jobs_dead,
       pg_relation_size('jobs') AS jobs_heap,
       coalesce(pg_relation_size(to_regclass('jobs_claim_idx')), 0) AS claim_idx,
       (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
        WHERE c.relname IN ('job_ready_0', 'job_ready_1', 'job_ready_2')) AS ready_total,
       (SELECT age(backend_xmin) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL
        ORDER BY age(backend_xmin) DESC LIMIT 1) AS xmin_age
"""


async def _one(conn: Conn, query: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    row = await (await conn.execute(query, params)).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row


def _picking(node: dict[str, Any]) -> dict[str, Any] | None:
    if node.get("Subplan Name") == "CTE picked":
        return node
    for child in node.get("Plans", ()):
        found = _picking(child)
        if found is not None:
            return found
    return None


async def claim_buffers(conn: Conn, queue_id: int) -> int:
    """Shared buffers the claim's picking step touches for n = 10: the dead entries it walks,
    counted without the machine's load in the way. Run in a transaction that is rolled back."""
    worker = await _one(conn, "SELECT min(id) AS id FROM workers")
    params = {
        "queue_id": queue_id,
        "worker_id": worker["id"],
        "n": 10,
        "lease_s": 30.0,
        "start": True,
        "solo": False,
        "limited": False,
        "now": None,
    }
    text = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + QUERIES["job_claim_batch"].sql
    async with conn.transaction(force_rollback=True):
        row = await _one(conn, text, params)
    plan = row["QUERY PLAN"]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    node = _picking(plan[0]["Plan"]) or {}
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


async def offer(url: str, rate: float, stop: asyncio.Event, counter: list[int]) -> None:
    conn = await connect(url, autocommit=True)
    try:
        project_id = await projects.resolve_project(conn, PROJECT, create=True)
        started = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - started) * rate) - counter[0]
            if due > 0:
                items = [BatchItem(handler="noop") for _ in range(min(due, 1000))]
                await enqueue.enqueue_batch(conn, project_id, BatchCreate(queue=QUEUE, jobs=items))
                counter[0] += len(items)
            await asyncio.sleep(TICK_S)
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=800.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--before-s", type=float, default=60.0)
    parser.add_argument("--hold-s", type=float, default=180.0)
    parser.add_argument("--after-s", type=float, default=60.0)
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    admin = testing.server_url(os.environ.get("JOBYARD_TEST_DATABASE_URL"))
    url = testing.create_clone(admin, testing.ensure_template(admin), prefix="jy_pressure_")
    conn = await connect(url, autocommit=True)
    holder = await connect(url)
    workers = WorkerProcesses(url, PROJECT, QUEUE, args.concurrency, args.workers)
    stop = asyncio.Event()
    counter = [0]
    try:
        project_id = await projects.resolve_project(conn, PROJECT, create=True)
        await projects.ensure_queues(conn, project_id, [QUEUE])
        (queue,) = await claim.queues_by_names(conn, project_id, [QUEUE])
        workers.start()
        await asyncio.sleep(3.0)  # the workers connect and LISTEN
        producer = asyncio.create_task(offer(url, args.rate, stop, counter))
        phases = [("before", args.before_s), ("held", args.hold_s), ("after", args.after_s)]
        t = 0.0
        print(
            f"| {'label':8} | phase  | t (s) | done/s | pickup p50 ms | pickup p99 ms "
            "| claim buffers | jobs dead tuples | jobs heap MB | jobs_claim_idx kB | job_ready kB "
            "| xmin age |",
            flush=True,
        )
        for phase, length in phases:
            if phase == "held":
                await holder.execute("SELECT txid_current()")
            if phase == "after":
                await holder.rollback()
            windows = max(1, round(length / args.window_s))
            for _ in range(windows):
                t0 = await _one(conn, "SELECT clock_timestamp() AS t")
                await asyncio.sleep(args.window_s)
                workers.check_alive()
                t1 = await _one(conn, "SELECT clock_timestamp() AS t")
                w = await _one(conn, WINDOW, {"t0": t0["t"], "t1": t1["t"]})
                s = await _one(conn, SIZES)
                s["claim_buffers"] = await claim_buffers(conn, queue.id)
                t += args.window_s
                span = (t1["t"] - t0["t"]).total_seconds()
                row = {
                    "label": args.label,
                    "phase": phase,
                    "t": t,
                    "done_per_s": w["done"] / span,
                    "p50": w["p50"],
                    "p99": w["p99"],
                    **s,
                }
                print(
                    f"| {args.label:8} | {phase:6} | {t:5.0f} | {row['done_per_s']:6.0f} "
                    f"| {row['p50'] or 0:13.1f} | {row['p99'] or 0:13.1f} "
                    f"| {s['claim_buffers']:13} | {s['jobs_dead']:16} "
                    f"| {s['jobs_heap'] / 2**20:12.1f} "
                    f"| {s['claim_idx'] / 1024:17.0f} | {s['ready_total'] / 1024:12.0f} "
                    f"| {s['xmin_age'] or 0:8} |",
                    flush=True,
                )
                print("#", json.dumps(row, default=str), flush=True)
        stop.set()
        await producer
        print(f"# offered {counter[0]} jobs at {args.rate:g}/s", flush=True)
    finally:
        stop.set()
        workers.stop()
        await holder.close()
        await conn.close()
        testing.drop_database(admin, url)


if __name__ == "__main__":
    asyncio.run(main())
