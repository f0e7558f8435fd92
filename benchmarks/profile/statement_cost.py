"""What one statement that writes `jobs` costs the server, at head and at an earlier revision.

    .venv/bin/python benchmarks/profile/statement_cost.py [--base-revision 0025] [--rounds 8]
        [--statements 3000] [--batches 20]

Two clones of the test template on the tests' embedded server: one at head, one downgraded to
`--base-revision`. In each, a loop in plpgsql runs `--statements` single-row statements in one
transaction (rolled back after) and returns the microseconds per statement: no client, no round
trip, no commit, so what is left is the executor's work per statement (compiling the table's
CHECKs, firing its triggers, inserting index entries). It also returns the WAL the loop inserted
per statement (the server's insert position before and after: run it on a quiet server). The
statements:

- insert: a queued job with the columns a single enqueue sets (the ready-set trigger fires);
- progress: `UPDATE jobs SET progress, progress_at` of one row by key (a HOT update);
- batch: `--batches` inserts of 1,000 queued jobs of one job batch each, as a batch enqueue
  writes them, reported per job.

The loops run in turns, the order alternating between rounds; medians and every round printed.
Written for migration 0026 (docs/BENCHMARKS.md, "The checks' fixed cost"); the batch and the WAL
for migration 0027 ("One claim index").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Final

from profiling_server import head_and_base

from jobyard.benchmarks import scenarios
from jobyard.db.pool import Conn, connect

# Session-local functions (pg_temp): nothing is left in the clones' schema.
LOOPS: Final = (
    """
CREATE FUNCTION pg_temp.cost_insert(project bigint, queue bigint, n integer,
                                    OUT us double precision, OUT wal double precision)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp(); w0 pg_lsn := pg_current_wal_insert_lsn();
BEGIN
    FOR i IN 1..n LOOP
        INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                          max_attempts)
        VALUES (project, queue, 'noop', '{}', 'queued', 0, now(), 5);
    END LOOP;
    us := extract(epoch FROM clock_timestamp() - t0) * 1e6 / n;
    wal := pg_wal_lsn_diff(pg_current_wal_insert_lsn(), w0) / n;
END $$""",
    """
CREATE FUNCTION pg_temp.cost_progress(project bigint, queue bigint, n integer,
                                      OUT us double precision, OUT wal double precision)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; w0 pg_lsn; target bigint;
BEGIN
    INSERT INTO jobs (project_id, queue_id, handler, status, run_at)
    VALUES (project, queue, 'noop', 'scheduled', now() + interval '1 day')
    RETURNING id INTO target;
    t0 := clock_timestamp();
    w0 := pg_current_wal_insert_lsn();
    FOR i IN 1..n LOOP
        UPDATE jobs SET progress = 0.5, progress_at = now() WHERE id = target;
    END LOOP;
    us := extract(epoch FROM clock_timestamp() - t0) * 1e6 / n;
    wal := pg_wal_lsn_diff(pg_current_wal_insert_lsn(), w0) / n;
END $$""",
    """
CREATE FUNCTION pg_temp.cost_batch(project bigint, queue bigint, n integer,
                                   OUT us double precision, OUT wal double precision)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp(); w0 pg_lsn := pg_current_wal_insert_lsn();
        batch bigint;
BEGIN
    FOR i IN 1..n LOOP
        INSERT INTO job_batches (project_id, queue_id, size) VALUES (project, queue, 1000)
        RETURNING id INTO batch;
        INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                          max_attempts, batch_id)
        SELECT project, queue, 'noop', '{}', 'queued', 0, now(), 5, batch
        FROM generate_series(1, 1000);
    END LOOP;
    us := extract(epoch FROM clock_timestamp() - t0) * 1e6 / (n * 1000);
    wal := pg_wal_lsn_diff(pg_current_wal_insert_lsn(), w0) / (n * 1000);
END $$""",
)
STATEMENTS: Final = ("insert", "progress", "batch")


async def _prepared(url: str) -> tuple[Conn, int, int]:
    conn = await connect(url, autocommit=True)
    project_id, queue = await scenarios._setup(conn)
    for loop in LOOPS:
        await conn.execute(loop)
    return conn, int(project_id), queue.id


async def _cost(
    conn: Conn, project: int, queue: int, statement: str, n: int
) -> tuple[float, float]:
    """(µs, WAL bytes) per statement, or per job for the batch."""
    async with conn.transaction(force_rollback=True):
        cur = await conn.execute(
            f"SELECT (pg_temp.cost_{statement}(%s, %s, %s)).*",
            (project, queue, n),
        )
        row = await cur.fetchone()
    assert row is not None
    return float(row["us"]), float(row["wal"])


Results = dict[tuple[str, str], list[tuple[float, float]]]


async def measure(urls: dict[str, str], rounds: int, n: int, batches: int) -> Results:
    prepared = {name: await _prepared(url) for name, url in urls.items()}
    results: Results = {}
    try:
        for r in range(rounds):
            order = list(prepared) if r % 2 == 0 else list(reversed(prepared))
            for statement in STATEMENTS:
                for name in order:
                    conn, project, queue = prepared[name]
                    count = batches if statement == "batch" else n
                    cost = await _cost(conn, project, queue, statement, count)
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
    parser.add_argument("--batches", type=int, default=20, help="batch inserts of 1,000 jobs")
    args = parser.parse_args()
    with head_and_base(args.base_revision, prefix="cost_") as urls:
        results = asyncio.run(measure(urls, args.rounds, args.statements, args.batches))
    rev = args.base_revision
    print(
        f"\nPer statement (the batch: per job), medians of {args.rounds} rounds of "
        f"{args.statements:,} statements ({args.batches} batches of 1,000 jobs)"
    )
    print(f"| statement | µs, {rev} | µs, head | head / {rev} | WAL bytes, {rev} | WAL, head |")
    print("|---|---:|---:|---:|---:|---:|")
    for statement in STATEMENTS:
        base = [statistics.median(x) for x in zip(*results[(statement, "base")], strict=True)]
        head = [statistics.median(x) for x in zip(*results[(statement, "head")], strict=True)]
        print(
            f"| {statement} | {base[0]:.1f} | {head[0]:.1f} | {head[0] / base[0]:.2f} "
            f"| {base[1]:.0f} | {head[1]:.0f} |"
        )
    for (statement, name), costs in sorted(results.items()):
        print(f"{statement:9s} {name:5s} {' '.join(f'{us:.1f}' for us, _ in costs)}")


if __name__ == "__main__":
    main()
