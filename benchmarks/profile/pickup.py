"""Where a pickup's time goes: `jobyard bench`'s pickup scenario, split at the enqueue's commit,
in turns with a base checkout and with PgQueuer (docs/BENCHMARKS.md, "Pickup latency").

    .venv/bin/python benchmarks/profile/pickup.py [--turns 5] [--base /tmp/base] [--pgqueuer]

Starts its own embedded PostgreSQL 18 in .jobyard/profile-pickup/pgdata with jobyard's settings
plus `track_commit_timestamp = on`. Each turn runs, on a fresh clone of the migrated template:

- `pickup`: the bench's scenario as it is (one idle `jobyard worker --concurrency 10`, 200
  single enqueues 20 ms apart; latency = the claim statement's start minus the enqueue
  statement's start, by the database clock).
- `split`: the same, but each enqueue in an explicit transaction that also reads its
  transaction id, so that `pg_xact_commit_timestamp` can say when it committed. It reports
  `commit → claim`: from the commit record to the claim statement's start, which is the WAL
  flush, the NOTIFY's delivery and the worker's own path. (The two added round trips fall
  before the commit, so they stay out of this part.)

With `--base DIR` every turn first runs the same two measurements with `PYTHONPATH=DIR/src`
(a `git worktree` of another commit), so that the worker processes run that code: an A/B in
turns on one server. With `--pgqueuer` each turn also runs PgQueuer's pickup
(benchmarks/peers/pgqueuer/pickup.py, in the peer venv that `make bench-peers` builds), whose
`commit → picked` runs from the commit of its `queued` log row to its `picked` row's now().
Prints one markdown table of medians over the turns, with min–max.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

from profiling_server import start_with

from jobyard.benchmarks import harness, scenarios
from jobyard.benchmarks.processes import WorkerProcesses
from jobyard.core import enqueue
from jobyard.db import embedded, testing
from jobyard.db.pool import connect
from jobyard.domain.schemas import JobCreate

ROOT: Final = Path(__file__).resolve().parent.parent.parent
DATA_DIR: Final = ROOT / ".jobyard" / "profile-pickup" / "pgdata"
PEER_PYTHON: Final = ROOT / ".jobyard" / "peers" / "pgqueuer" / "venv" / "bin" / "python"
PEER_SCRIPT: Final = ROOT / "benchmarks" / "peers" / "pgqueuer" / "pickup.py"
SIZES: Final = harness.FULL


def log(message: str) -> None:
    print(f"[pickup] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def split(url: str) -> dict[str, float]:
    """The pickup scenario with each enqueue's commit time known: commit → claim start.

    It repeats scenarios.pickup with its own enqueue, and calls that module's private helpers
    on purpose: with `--base` this function runs on another commit's package, so it may only
    use what older commits have too. A public hook added to scenarios.pickup now would not
    exist in the bases it is meant to measure."""
    conn = await connect(url, autocommit=True)
    workers = WorkerProcesses(url, scenarios.PROJECT, scenarios.QUEUE, SIZES.pickup_concurrency, 1)
    xids: dict[int, str] = {}
    try:
        project_id, queue = await scenarios._setup(conn)
        workers.start()
        await scenarios._wait_listening(conn, workers, 1)
        await asyncio.sleep(0.5)
        for _ in range(SIZES.pickup):
            async with conn.transaction():
                result = await enqueue.enqueue(
                    conn,
                    project_id,
                    JobCreate(queue=scenarios.QUEUE, handler="noop"),
                    whole_job=False,
                )
                cur = await conn.execute("SELECT pg_current_xact_id()::text AS xid")
                row = await cur.fetchone()
            assert row is not None
            xids[int(result.job["id"])] = str(row["xid"])
            await asyncio.sleep(SIZES.pickup_gap_s)
        await scenarios._wait_until_done(conn, queue, SIZES.pickup, workers)
        cur = await conn.execute(
            "SELECT extract(epoch FROM e.started_at"
            "  - pg_xact_commit_timestamp(t.xid::xid)) * 1000 AS ms"
            " FROM unnest(%s::bigint[], %s::text[]) AS t(id, xid)"
            " JOIN job_executions e ON e.job_id = t.id AND e.execution_seq = 1",
            (list(xids), list(xids.values())),
        )
        ms = [float(r["ms"]) for r in await cur.fetchall()]
    finally:
        workers.stop()
        await conn.close()
    return {"commit_claim_p50": statistics.median(ms), "commit_claim_p99": percentile(ms, 0.99)}


async def measure(url: str) -> dict[str, float]:
    admin = url
    template = testing.ensure_template(admin)
    numbers: dict[str, float] = {}
    for step in ("pickup", "split"):
        clone = testing.create_clone(admin, template, "jy_pickup_")
        try:
            if step == "pickup":
                got = await scenarios.pickup(
                    clone, SIZES.pickup, SIZES.pickup_gap_s, SIZES.pickup_concurrency
                )
                numbers.update(p50=got.p50_ms, p99=got.p99_ms)
            else:
                numbers.update(await split(clone))
        finally:
            testing.drop_database(admin, clone)
    return numbers


def one_side(url: str, pythonpath: str | None) -> dict[str, float]:
    """One turn of one side, in a child process so that PYTHONPATH picks the code."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(  # noqa: S603 - our own interpreter and script
        [sys.executable, __file__, "--one", url], env=env, check=True, capture_output=True
    )
    parsed: dict[str, float] = json.loads(out.stdout)
    return parsed


def peer_side(url: str) -> dict[str, float]:
    out = subprocess.run(  # noqa: S603 - the peer venv's interpreter and our script
        [
            str(PEER_PYTHON),
            str(PEER_SCRIPT),
            "--url",
            url,
            "--jobs",
            str(SIZES.pickup),
            "--gap-s",
            str(SIZES.pickup_gap_s),
            "--batch-size",
            str(SIZES.pickup_concurrency),
            "--workdir",
            str(DATA_DIR.parent / "pgqueuer"),
        ],
        check=True,
        capture_output=True,
    )
    parsed: dict[str, float] = json.loads(out.stdout)
    return parsed


def table(results: dict[str, list[dict[str, float]]]) -> str:
    keys = [
        ("p50", "pickup p50"),
        ("p99", "pickup p99"),
        ("commit_claim_p50", "commit → claim p50"),
        ("commit_claim_p99", "commit → claim p99"),
    ]
    sides = list(results)
    lines = [
        "| ms (median of turns, min–max) | " + " | ".join(sides) + " |",
        "|---|" + "---|" * len(sides),
    ]
    for key, title in keys:
        cells = []
        for side in sides:
            values = [turn[key] for turn in results[side]]
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--base", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--pgqueuer", action="store_true", help="PgQueuer in the turns too")
    parser.add_argument("--one", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(measure(args.one))))
        return
    if args.pgqueuer and not PEER_PYTHON.exists():
        parser.error(f"{PEER_PYTHON} is missing: run `make bench-peers` once to build it")
    url = start_with(DATA_DIR, {"track_commit_timestamp": "on"})
    sides: list[tuple[str, Any]] = []
    if args.base:
        base = str(args.base.resolve() / "src")
        sides.append((f"base ({args.base.name})", lambda: one_side(url, base)))
    sides.append(("this checkout", lambda: one_side(url, None)))
    if args.pgqueuer:
        sides.append(("PgQueuer", lambda: peer_side(url)))
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    try:
        for turn in range(1, args.turns + 1):
            for name, run_side in sides:
                log(f"turn {turn}/{args.turns}: {name}")
                results[name].append(run_side())
                log(f"  {results[name][-1]}")
    finally:
        embedded.stop(DATA_DIR)
    print(table(results))


if __name__ == "__main__":
    main()
