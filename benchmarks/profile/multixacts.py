"""MultiXacts that concurrent single enqueues into one queue make, at head and at an earlier
revision (docs/BENCHMARKS.md, "Enqueues that share a queue make no MultiXacts").

    .venv/bin/python benchmarks/profile/multixacts.py [--base-revision 0033] [--rounds 3]
        [--enqueues 4000] [--connections 4 8]

Two clones of the test template on the tests' embedded server, one at head and one downgraded to
`--base-revision`. Each round runs, in turns (the order alternating), `jobyard bench`'s single
enqueue (`scenarios.enqueue_single`: `core.enqueue.enqueue`, one autocommit transaction each)
with `--enqueues` jobs spread over each number of `--connections`, and reads the cluster's next
MultiXact id and member offset from a checkpoint before and after. The server is shared with
nothing else while it runs, so the difference is what the enqueues made. Prints the enqueue rate,
MultiXacts and members per 1,000 enqueues, medians over the rounds and every round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Final

from profiling_server import head_and_base

from jobyard.benchmarks import scenarios
from jobyard.db.pool import connect

Counters = tuple[int, int]
# (revision label, connections) -> [(enqueues/s, MultiXacts, members), ...]
Results = dict[tuple[str, int], list[tuple[float, int, int]]]
NAMES: Final = ("base", "head")


async def _multixact_counters(url: str) -> Counters:
    """The next MultiXact id and member offset, as of a checkpoint taken now."""
    conn = await connect(url, autocommit=True)
    try:
        await conn.execute("CHECKPOINT")
        cur = await conn.execute(
            "SELECT next_multixact_id::text::bigint AS ids, next_multi_offset::text::bigint AS"
            " members FROM pg_control_checkpoint()"
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row["ids"]), int(row["members"])
    finally:
        await conn.close()


async def _turn(url: str, enqueues: int, connections: int) -> tuple[float, int, int]:
    ids, members = await _multixact_counters(url)
    rate = await scenarios.enqueue_single(url, enqueues, connections)
    ids_after, members_after = await _multixact_counters(url)
    return rate, ids_after - ids, members_after - members


async def measure(
    urls: dict[str, str], rounds: int, enqueues: int, connections: list[int]
) -> Results:
    results: Results = {}
    for r in range(rounds):
        order = list(NAMES) if r % 2 == 0 else list(reversed(NAMES))
        for count in connections:
            for name in order:
                results.setdefault((name, count), []).append(
                    await _turn(urls[name], enqueues, count)
                )
        print(f"round {r + 1}/{rounds} done", flush=True)
    return results


def _per_thousand(n: float, enqueues: int) -> float:
    return n * 1000 / enqueues


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-revision", default="0033")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--enqueues", type=int, default=4000)
    parser.add_argument("--connections", type=int, nargs="+", default=[4, 8])
    args = parser.parse_args()
    with head_and_base(args.base_revision, prefix="mxact_") as urls:
        results = asyncio.run(measure(urls, args.rounds, args.enqueues, args.connections))
    rev = args.base_revision
    print(
        f"\n{args.enqueues:,} single enqueues into one queue, medians of {args.rounds} rounds"
        f" (per 1,000 enqueues for MultiXacts and members)"
    )
    print("| connections | revision | enqueues/s | MultiXacts | members |")
    print("|---:|---|---:|---:|---:|")
    for count in args.connections:
        for name in NAMES:
            runs = results[(name, count)]
            rate, ids, members = (statistics.median(x) for x in zip(*runs, strict=True))
            label = rev if name == "base" else "head"
            print(
                f"| {count} | {label} | {rate:,.0f} | {_per_thousand(ids, args.enqueues):,.0f}"
                f" | {_per_thousand(members, args.enqueues):,.0f} |"
            )
    for (name, count), runs in sorted(results.items()):
        print(f"{name:4s} x{count}: " + "  ".join(f"{r:,.0f}/s {i} {m}" for r, i, m in runs))


if __name__ == "__main__":
    main()
