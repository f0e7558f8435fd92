"""What suspects cost: drain a queue of short jobs with one worker, without suspects and with
some, and compare the wall time (docs/WORKER.md, "Poison pills").

A suspect runs alone, so the worker finishes what it holds first: each suspect costs about one
drain of the worker (the longest job in flight) plus its own run, on top of the work itself.

    .venv/bin/python benchmarks/suspects/run.py [--jobs 2000] [--suspects 0,10,50]
        [--seconds 0.01] [--concurrency 10] [--rounds 3]

Runs against the embedded test server (or JOBYARD_TEST_DATABASE_URL), in a throwaway database
cloned from the migrated template; a real Worker in this process, the built-in `sleep` handler.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

from jobyard.db import testing
from jobyard.db.pool import connect
from jobyard.worker.commands import worker_registry
from jobyard.worker.runtime import Worker, WorkerConfig

PROJECT = "bench/suspects"


async def one_round(url: str, jobs: int, suspects: int, seconds: float, concurrency: int) -> float:
    config = WorkerConfig(
        url=url, project=PROJECT, queues=("default",), concurrency=concurrency, name="bench"
    )
    worker = Worker(config, worker_registry(None))
    conn = await connect(url, autocommit=True)
    try:
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(worker.ready.wait(), 60)
        await conn.execute("DELETE FROM jobs")
        # Held back (scheduled) while they are written, then released at once.
        await conn.execute(
            """INSERT INTO jobs (project_id, queue_id, handler, payload, status, run_at, suspect)
               SELECT q.project_id, q.id, 'sleep', jsonb_build_object('seconds', %s::float8),
                      'scheduled', now() + interval '1 hour',
                      -- suspects spread evenly through the queue
                      %s > 0 AND g %% greatest(1, %s / greatest(%s, 1)) = 0
                          AND g <= %s * greatest(1, %s / greatest(%s, 1))
               FROM queues q, generate_series(1, %s) g WHERE q.name = 'default'""",
            (seconds, suspects, jobs, suspects, suspects, jobs, suspects, jobs),
        )
        started = time.perf_counter()
        await conn.execute(
            "WITH q AS (UPDATE jobs SET status = 'queued', run_at = now() RETURNING queue_id)"
            " SELECT pg_notify('jobyard_jobs', (SELECT min(queue_id) FROM q)::text)"
        )
        while True:
            cur = await conn.execute("SELECT count(*) AS n FROM jobs WHERE status <> 'done'")
            row = await cur.fetchone()
            if row is not None and row["n"] == 0:
                break
            await asyncio.sleep(0.01)
        took = time.perf_counter() - started
        worker.request_drain()
        await task
        return took
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--suspects", default="0,10,50")
    parser.add_argument("--seconds", type=float, default=0.01)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    admin = testing.server_url(os.environ.get("JOBYARD_TEST_DATABASE_URL"))
    url = testing.create_clone(admin, testing.ensure_template(admin), prefix="jy_bench_")
    try:
        results = []
        for k in (int(x) for x in args.suspects.split(",")):
            times = [
                await one_round(url, args.jobs, k, args.seconds, args.concurrency)
                for _ in range(args.rounds)
            ]
            best = min(times)
            results.append({"suspects": k, "median_s": statistics.median(times), "best_s": best})
            print(json.dumps({"jobs": args.jobs, **results[-1]}), flush=True)
        base = results[0]["median_s"]
        for r in results[1:]:
            if r["suspects"]:
                extra = (r["median_s"] - base) / r["suspects"] * 1000
                print(f"{r['suspects']} suspects: +{extra:.0f} ms each (median)", flush=True)
    finally:
        testing.drop_database(admin, url)


if __name__ == "__main__":
    asyncio.run(main())
