"""The server's CPU and WAL per job of a real batch enqueue (`core.enqueue.enqueue_batch`).

    .venv/bin/python benchmarks/profile/batch_cpu.py [--turns 20] [--batches 20]
        [--against-nulls] [--against-fillfactor N]

On a clone of the test template on the tests' embedded server, one connection enqueues
`--batches` batches of 1,000 no-op jobs per turn (the table truncated before each turn) and
reads its backend's CPU time from `/proc/<pid>/schedstat` (the server runs on this host) and the
WAL inserted meanwhile. CPU time of one backend is steadier than wall time on a shared host; the
minimum and the quartiles are printed beside the median. With `--against-nulls` each turn also
runs, in alternating order, the items document as it was sent before item 21 of
docs/BENCHMARKS.md (every unset optional field as `null`), so the two are compared in turns.
With `--against-fillfactor N` each turn also runs with `jobs` at fillfactor N instead of the
migrated 40 (migration 0030, which leaves room on every page for the claim's HOT update), set
before the turn's TRUNCATE so that the turn's rows are written with it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any, Final

from jobyard.benchmarks import scenarios
from jobyard.core import enqueue
from jobyard.db import embedded, testing
from jobyard.db.pool import Conn, connect
from jobyard.domain.schemas import BatchCreate

JOBS_PER_BATCH: Final = 1_000
MIGRATED_FILL: Final = 40  # jobs' fillfactor since migration 0030
AS_SENT: Final = enqueue._BATCH_ITEMS


class _WithNulls:
    """The items serializer as before item 21: unset optional fields written as null."""

    def dump_json(self, value: Any, **_: Any) -> bytes:
        return AS_SENT.dump_json(value)


def _use_serializer(serializer: Any) -> None:
    # The module constant swapped for this process only: the benchmark's one way to send the old
    # document through the real enqueue path.
    vars(enqueue)["_BATCH_ITEMS"] = serializer


def _backend_cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


async def _turn(
    conn: Conn, project_id: Any, pid: int, batches: int, fillfactor: int
) -> tuple[float, float, float]:
    """(server µs, client µs, WAL bytes) per job over `batches` batch enqueues."""
    await conn.execute(f"ALTER TABLE jobs SET (fillfactor = {int(fillfactor)})")
    await conn.execute("TRUNCATE jobs CASCADE")
    cur = await conn.execute("SELECT pg_current_wal_insert_lsn() AS lsn")
    row = await cur.fetchone()
    assert row is not None
    items = [{"handler": scenarios.HANDLER}] * JOBS_PER_BATCH
    server0, client0 = _backend_cpu_ns(pid), time.process_time()
    for _ in range(batches):
        batch = BatchCreate.model_validate({"queue": scenarios.QUEUE, "jobs": items})
        await enqueue.enqueue_batch(conn, project_id, batch)
    server, client = _backend_cpu_ns(pid) - server0, time.process_time() - client0
    cur = await conn.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s) AS wal", (row["lsn"],)
    )
    wal = await cur.fetchone()
    assert wal is not None
    jobs = batches * JOBS_PER_BATCH
    return server / jobs / 1e3, client / jobs * 1e6, float(wal["wal"]) / jobs


async def measure(
    url: str, turns: int, batches: int, variants: list[str], fillfactor: int | None
) -> dict[str, Any]:
    conn = await connect(url, autocommit=True)
    try:
        project_id, _ = await scenarios._setup(conn)
        cur = await conn.execute("SELECT pg_backend_pid() AS pid")
        row = await cur.fetchone()
        assert row is not None
        results: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
        for t in range(turns):
            for variant in variants if t % 2 == 0 else list(reversed(variants)):
                _use_serializer(_WithNulls() if variant == "with nulls" else AS_SENT)
                factor = MIGRATED_FILL
                if fillfactor is not None and variant == f"fillfactor {fillfactor}":
                    factor = fillfactor
                results[variant].append(await _turn(conn, project_id, row["pid"], batches, factor))
            print(f"turn {t + 1}/{turns} done", flush=True)
        return results
    finally:
        _use_serializer(AS_SENT)
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--against-nulls", action="store_true")
    parser.add_argument("--against-fillfactor", type=int, default=None, metavar="N")
    args = parser.parse_args()
    variants = ["as sent", "with nulls"] if args.against_nulls else ["as sent"]
    if args.against_fillfactor is not None:
        variants.append(f"fillfactor {args.against_fillfactor}")
    admin = embedded.start(testing.test_pgdata())
    url = testing.create_clone(admin, testing.ensure_template(admin), prefix="batchcpu_")
    try:
        results = asyncio.run(
            measure(url, args.turns, args.batches, variants, args.against_fillfactor)
        )
    finally:
        testing.drop_database(admin, url)
    print(f"\nPer job, {args.turns} turns of {args.batches} batches of {JOBS_PER_BATCH:,}")
    print("| items | server µs, median (min, q1) | client µs, median | WAL bytes, median |")
    print("|---|---:|---:|---:|")
    for variant, rows in results.items():
        server = sorted(r[0] for r in rows)
        print(
            f"| {variant} | {statistics.median(server):.2f} ({server[0]:.2f}, "
            f"{server[len(server) // 4]:.2f}) | {statistics.median(r[1] for r in rows):.2f} "
            f"| {statistics.median(r[2] for r in rows):.0f} |"
        )


if __name__ == "__main__":
    main()
