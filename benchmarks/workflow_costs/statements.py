"""Where the dependency bookkeeping's time goes: what one completion of 100 jobs costs the
server, by EXPLAIN ANALYZE, plain jobs against parents with one waiting child each.

Drains through worker processes swing by ±30 % on this shared host, more than the effect; the
server's own time for the statement does not depend on how fast the workers were woken. In one
database of the bench server, each round, in this order:

- plain: 100 queued no-op jobs are claimed and completed (`job_complete_many`);
- parents: 100 parents, each with one waiting child, are claimed and completed (the trigger
  queues the 100 children);
- children: those 100 children are claimed and completed.

The figure is the completion's Execution Time (trigger included) and the trigger's own time.
The dependency bookkeeping of a parent → child pair against two plain jobs is
`parents + children − 2 × plain` per completion of 100 pairs.

    .venv/bin/python benchmarks/workflow_costs/statements.py [--rounds 40] [--warmup 5]
        [--variant FILE.sql]

`--variant` installs another `jobs_final_effects` (a CREATE OR REPLACE FUNCTION file) and runs
the rounds in turns with the migrated one (A = the file, B = the head), to compare a change.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from psycopg.rows import dict_row

from jobyard.benchmarks.scenarios import _setup  # the bench's project and queue
from jobyard.core import claim
from jobyard.db import embedded, run, testing
from jobyard.db.pool import Conn, connect
from jobyard.db.queries import sql
from jobyard.domain.ids import WorkerId
from jobyard.domain.models import ClaimedJob, QueueRef

ROOT = Path(__file__).resolve().parents[2]
N = 100


async def _complete(conn: Conn, jobs: list[ClaimedJob]) -> tuple[float, float]:
    params = {
        "ids": [j.id for j in jobs],
        "seqs": [j.execution_seq for j in jobs],
        "results": [None] * len(jobs),
        "worker_id": jobs[0].worker_id,
        "now": None,
    }
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + sql("job_complete_many"),  # type: ignore[operator]
            params,
        )
        row = await cur.fetchone()
    assert row is not None
    plan: dict[str, Any] = row["QUERY PLAN"][0]
    trigger = sum(
        t["Time"] for t in plan.get("Triggers", []) if t["Trigger Name"] == "jobs_final_effects"
    )
    return float(plan["Execution Time"]), float(trigger)


async def _claim(conn: Conn, queue: QueueRef, worker: WorkerId) -> list[ClaimedJob]:
    jobs = await claim.claim_batch(conn, queue, worker, N, lease_s=60, start=True)
    assert len(jobs) == N, len(jobs)
    return jobs


async def _round(conn: Conn, queue: QueueRef, worker: WorkerId) -> dict[str, float]:
    out: dict[str, float] = {}
    await conn.execute(
        "INSERT INTO jobs (project_id, queue_id, handler) SELECT project_id, id, 'noop'"
        " FROM queues, generate_series(1, %s) WHERE id = %s",
        (N, queue.id),
    )
    out["plain_ms"], out["plain_trigger_ms"] = await _complete(
        conn, await _claim(conn, queue, worker)
    )
    await conn.execute(
        "INSERT INTO jobs (project_id, queue_id, handler) SELECT project_id, id, 'noop'"
        " FROM queues, generate_series(1, %s) WHERE id = %s",
        (N, queue.id),
    )
    await run.execute(conn, "bench_insert_children", {"queue_id": queue.id})
    parents = await _claim(conn, queue, worker)
    out["parents_ms"], out["parents_trigger_ms"] = await _complete(conn, parents)
    children = await _claim(conn, queue, worker)
    out["children_ms"], out["children_trigger_ms"] = await _complete(conn, children)
    out["pair_extra_ms"] = out["parents_ms"] + out["children_ms"] - 2 * out["plain_ms"]
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--variant", type=Path, default=None)
    args = parser.parse_args()
    admin = embedded.start(ROOT / ".jobyard" / "bench-pgdata")
    url = testing.create_clone(admin, testing.ensure_template(admin), prefix="jy_bench_")
    conn = await connect(url, autocommit=True)
    try:
        _, queue = await _setup(conn)
        worker_row = await (
            await conn.execute(
                "INSERT INTO workers (project_id, name, concurrency)"
                " SELECT project_id, 'ab', 100 FROM queues WHERE id = %s RETURNING id",
                (queue.id,),
            )
        ).fetchone()
        assert worker_row is not None
        worker = WorkerId(worker_row["id"])
        head = await (
            await conn.execute("SELECT pg_get_functiondef('jobs_final_effects'::regproc) AS f")
        ).fetchone()
        assert head is not None
        variants = {"B": head["f"]}
        if args.variant is not None:
            variants["A"] = args.variant.read_text()
        results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
        started = time.strftime("%H:%M:%S", time.gmtime())
        for n in range(args.warmup + args.rounds):
            for v in sorted(variants) if n % 2 == 0 else sorted(variants, reverse=True):
                await conn.execute(variants[v])  # type: ignore[arg-type]
                got = await _round(conn, queue, worker)
                if n >= args.warmup:
                    results[v].append(got)
        print(f"{started}–{time.strftime('%H:%M:%S', time.gmtime())} UTC, {args.rounds} rounds",
              flush=True)  # fmt: skip
        for v, rounds in results.items():
            med = {k: round(statistics.median(r[k] for r in rounds), 3) for k in rounds[0]}
            print(json.dumps({"variant": v, **med}), flush=True)
    finally:
        await conn.close()
        testing.drop_database(admin, url)


if __name__ == "__main__":
    asyncio.run(main())
