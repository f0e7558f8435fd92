"""PgQueuer's pickup, split at the enqueue's commit, for benchmarks/profile/pickup.py.

Runs in the peer venv (never imports jobyard) against a server with `track_commit_timestamp =
on`. One idle `pgq run` worker, warmed by one job; `--jobs` single enqueues `--gap-s` apart.
Prints one JSON object: the pickup percentiles of bench.py's `pickup` ('picked' log row's
created minus the 'queued' row's, database clock) and `commit → picked`, from the commit of the
'queued' log row (written by the enqueue statement itself, and never updated) to the 'picked'
row's created.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path

from bench import ENTRYPOINT, Bench, connect, wait_successful


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def measure(
    url: str, jobs: int, gap_s: float, batch_size: int, workdir: Path
) -> dict[str, float]:
    bench = Bench(url, workdir)
    db_url = await bench.fresh_database("pickup_split")
    conn, queries = await connect(db_url)
    workers = bench.workers(db_url, 1, ["--batch-size", str(batch_size)])
    try:
        workers.start()
        (warm_id,) = await queries.enqueue(ENTRYPOINT, None)
        await wait_successful(conn, 1, workers)
        await asyncio.sleep(0.5)
        for _ in range(jobs):
            await queries.enqueue(ENTRYPOINT, None)
            await asyncio.sleep(gap_s)
        await wait_successful(conn, jobs + 1, workers)
        rows = await conn.fetch(
            """
            SELECT extract(epoch FROM p.created - q.created) * 1000 AS pickup,
                   extract(epoch FROM p.created - pg_xact_commit_timestamp(q.xmin)) * 1000
                       AS commit_picked
            FROM pgqueuer_log q
            JOIN LATERAL (SELECT min(created) AS created FROM pgqueuer_log p
                          WHERE p.job_id = q.job_id AND p.status = 'picked') p ON TRUE
            WHERE q.status = 'queued' AND q.job_id <> $1
            """,
            warm_id,
        )
    finally:
        workers.stop()
        await conn.close()
    pickup = [float(r["pickup"]) for r in rows]
    split = [float(r["commit_picked"]) for r in rows]
    return {
        "p50": statistics.median(pickup),
        "p99": percentile(pickup, 0.99),
        "commit_claim_p50": statistics.median(split),
        "commit_claim_p99": percentile(split, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--gap-s", type=float, default=0.02)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(measure(args.url, args.jobs, args.gap_s, args.batch_size, args.workdir))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
