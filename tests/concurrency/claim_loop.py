"""One claim loop in its own process, for the exactly-once race tests.

Run as `python -m tests.concurrency.claim_loop --url … --project-id … --queue … --index … --out …`.
It opens its own connection, registers its own worker row, then waits on a shared advisory lock
that the test holds (the start gate), so all loops leave the gate together and really race.
After the gate it repeatedly claims a random 1..max_n jobs, starts and completes what it got
(optionally holding them a few ms), and stops after two empty claims in a row. It writes every
claim call (n asked, ids and seqs returned, latency) and every error to a JSON file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from pathlib import Path
from typing import Any

from jobyard.core import transitions, workers
from jobyard.core.claim import claim_batch, queues_by_names
from jobyard.db.pool import Conn, connect
from jobyard.domain.ids import ProjectId, QueueId

# A loop that keeps failing is broken code under test, not a race; stop instead of spinning.
MAX_ERRORS = 200


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True)
    p.add_argument("--project-id", type=int, required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gate-key", type=int, required=True, help="advisory lock the test holds")
    p.add_argument("--max-n", type=int, default=50)
    p.add_argument("--hold-ms", type=float, nargs=2, default=(0.0, 0.0), metavar=("MIN", "MAX"))
    p.add_argument("--seed", type=int, default=None)
    return p.parse_args(argv)


async def _queued_left(conn: Conn, queue_id: QueueId) -> bool:
    cur = await conn.execute(
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue_id = %s AND status = 'queued') AS left",
        (queue_id,),
    )
    row = await cur.fetchone()
    return bool(row and row["left"])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    conn = await connect(args.url, autocommit=True, application_name=f"claim-loop-{args.index}")
    try:
        project = ProjectId(args.project_id)
        worker_id = await workers.register(
            conn, project, name=f"claim-loop-{args.index}", queues=[args.queue], concurrency=50
        )
        (queue,) = await queues_by_names(conn, project, [args.queue])
        # The start gate: blocks until the test releases its exclusive hold on the key.
        await conn.execute("SELECT pg_advisory_lock_shared(%s)", (args.gate_key,))
        await conn.execute("SELECT pg_advisory_unlock_shared(%s)", (args.gate_key,))
        rng = random.Random(args.seed)
        calls: list[dict[str, Any]] = []
        errors: list[str] = []
        not_started = not_completed = 0
        empties = 0
        t_start = time.perf_counter()
        while empties < 2 and len(errors) < MAX_ERRORS:
            n = rng.randint(1, args.max_n)
            wall = time.time()  # comparable across processes: shows how close the calls raced
            t0 = time.perf_counter()
            try:
                jobs = await claim_batch(conn, queue, worker_id, n, lease_s=30)
            except Exception as exc:  # the broken variants raise; record and keep racing
                errors.append(f"claim: {type(exc).__name__}: {exc}".strip())
                if conn.broken:
                    break
                continue
            calls.append(
                {
                    "n": n,
                    "ids": [j.id for j in jobs],
                    "seqs": [j.execution_seq for j in jobs],
                    "at": wall,
                    "ms": (time.perf_counter() - t0) * 1000,
                }
            )
            if not jobs:
                # Under max_concurrency an empty claim can mean "no room yet", not "no work".
                if queue.max_concurrency is not None and await _queued_left(conn, queue.id):
                    empties = 0
                    await asyncio.sleep(0.001)
                    continue
                empties += 1
                continue
            empties = 0
            try:
                started = await transitions.start_many(conn, jobs)
                held = [j for j in jobs if j.id in started]
                low, high = args.hold_ms
                if high > 0:
                    await asyncio.sleep(rng.uniform(low, high) / 1000)
                done = await transitions.complete_many(conn, held)
            except Exception as exc:
                errors.append(f"finish: {type(exc).__name__}: {exc}".strip())
                if conn.broken:
                    break
                continue
            not_started += len(jobs) - len(held)
            not_completed += len(held) - len(done)
        return {
            "index": args.index,
            "pid": os.getpid(),
            "worker_id": worker_id,
            "seconds": time.perf_counter() - t_start,
            "calls": calls,
            "errors": errors,
            "not_started": not_started,
            "not_completed": not_completed,
        }
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    report = asyncio.run(run(args))
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report), encoding="utf-8")
    tmp.replace(args.out)  # the test never reads a half-written report


if __name__ == "__main__":
    main()
