"""What one statement that writes `jobs` costs the server, at head and at an earlier revision.

    .venv/bin/python benchmarks/profile/statement_cost.py [--base-revision 0025] [--rounds 8]
        [--statements 3000]

Two clones of the test template on the tests' embedded server: one at head, one downgraded to
`--base-revision`. In each, a loop in plpgsql runs `--statements` single-row statements in one
transaction (rolled back after) and returns the microseconds per statement: no client, no round
trip, no commit, so what is left is the executor's work per statement (compiling the table's
CHECKs, firing its triggers, inserting index entries). The statements:

- insert: a queued job with the columns a single enqueue sets (the ready-set trigger fires);
- progress: `UPDATE jobs SET progress, progress_at` of one row by key (a HOT update).

The loops run in turns, the order alternating between rounds; medians and every round printed.
Written for migration 0026 (docs/BENCHMARKS.md, "The checks' fixed cost").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Final

from jobyard.benchmarks import scenarios
from jobyard.db import embedded, migrate, testing
from jobyard.db.pool import Conn, connect

# Session-local functions (pg_temp): nothing is left in the clones' schema.
LOOPS: Final = (
    """
CREATE FUNCTION pg_temp.cost_insert(project bigint, queue bigint, n integer)
RETURNS double precision LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
    FOR i IN 1..n LOOP
        INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                          max_attempts)
        VALUES (project, queue, 'noop', '{}', 'queued', 0, now(), 5);
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / n;
END $$""",
    """
CREATE FUNCTION pg_temp.cost_progress(project bigint, queue bigint, n integer)
RETURNS double precision LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; target bigint;
BEGIN
    INSERT INTO jobs (project_id, queue_id, handler, status, run_at)
    VALUES (project, queue, 'noop', 'scheduled', now() + interval '1 day')
    RETURNING id INTO target;
    t0 := clock_timestamp();
    FOR i IN 1..n LOOP
        UPDATE jobs SET progress = 0.5, progress_at = now() WHERE id = target;
    END LOOP;
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / n;
END $$""",
)
STATEMENTS: Final = ("insert", "progress")


async def _prepared(url: str) -> tuple[Conn, int, int]:
    conn = await connect(url, autocommit=True)
    project_id, queue = await scenarios._setup(conn)
    for loop in LOOPS:
        await conn.execute(loop)
    return conn, int(project_id), queue.id


async def _cost(conn: Conn, project: int, queue: int, statement: str, n: int) -> float:
    async with conn.transaction(force_rollback=True):
        cur = await conn.execute(
            f"SELECT pg_temp.cost_{statement}(%s, %s, %s) AS us",
            (project, queue, n),
        )
        row = await cur.fetchone()
    assert row is not None
    return float(row["us"])


async def measure(urls: dict[str, str], rounds: int, n: int) -> dict[tuple[str, str], list[float]]:
    prepared = {name: await _prepared(url) for name, url in urls.items()}
    results: dict[tuple[str, str], list[float]] = {}
    try:
        for r in range(rounds):
            order = list(prepared) if r % 2 == 0 else list(reversed(prepared))
            for statement in STATEMENTS:
                for name in order:
                    conn, project, queue = prepared[name]
                    cost = await _cost(conn, project, queue, statement, n)
                    results.setdefault((statement, name), []).append(cost)
            print(f"round {r + 1}/{rounds} done", flush=True)
    finally:
        for conn, _, _ in prepared.values():
            await conn.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-revision", default="0025")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--statements", type=int, default=3000)
    args = parser.parse_args()
    admin = embedded.start(testing.test_pgdata())
    template = testing.ensure_template(admin)
    urls = {
        name: testing.create_clone(admin, template, prefix="cost_") for name in ("base", "head")
    }
    try:
        migrate.downgrade(urls["base"], args.base_revision)
        results = asyncio.run(measure(urls, args.rounds, args.statements))
    finally:
        for url in urls.values():
            testing.drop_database(admin, url)
    print(f"\nµs per statement, medians of {args.rounds} rounds of {args.statements:,}")
    print(f"| statement | {args.base_revision} | head | head / {args.base_revision} |")
    print("|---|---:|---:|---:|")
    for statement in STATEMENTS:
        base = statistics.median(results[(statement, "base")])
        head = statistics.median(results[(statement, "head")])
        print(f"| {statement} | {base:.1f} | {head:.1f} | {head / base:.2f} |")
    for (statement, name), costs in sorted(results.items()):
        print(f"{statement:9s} {name:5s} {' '.join(f'{c:.0f}' for c in costs)}")


if __name__ == "__main__":
    main()
