"""Where a single enqueue's wall time goes: the SDK's call against plainer inserts, in turns.

    .venv/bin/python benchmarks/profile/enqueue_split.py [--rounds 5] [--calls 800]

Starts its own embedded PostgreSQL 18 in .jobyard/profile-enqueue/pgdata with jobyard's
durable settings (the tests' server has fsync off, which would hide the commit), makes a clone
of the migrated template, and times `--calls` calls of each variant on one autocommit
connection, each call its own transaction, the variants in turns (the order reversed every
other round). Medians of the rounds, microseconds a call, round trip and commit included:

- `SELECT 1`: the round trip alone;
- bare insert: a row into a table with a key and nothing else, and its commit (the floor for
  any durable enqueue, and about what a queue with a plain job table pays);
- `jobs`, triggers off: the same `INSERT` into `jobs` with the two statement triggers of the
  insert disabled (the job's row and its indexes);
- `jobs`, no ready row / no reference check: one of the two triggers disabled;
- `jobs`: the plain `INSERT` with every trigger;
- `jobs` + NOTIFY: the same with the `pg_notify` the enqueue sends;
- `jobs` + ON CONFLICT: the same with the idempotency key's arbiter, which makes the insert a
  speculative one (a probe before, a confirm record after) even for a job without a key;
- `core.enqueue.enqueue`: what the SDK's `defer` runs (the queue looked up by name in the same
  statement, the id and status sent back).

Disabling a trigger takes `ALTER TABLE` between rounds, on this clone only. Written for issue 15
point 3 (docs/BENCHMARKS.md, "A single enqueue, split").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from profiling_server import start_with

from jobyard.benchmarks import scenarios
from jobyard.core import enqueue
from jobyard.db import embedded, testing
from jobyard.db.pool import Conn, connect
from jobyard.domain.ids import ProjectId
from jobyard.domain.schemas import JobCreate

ROOT: Final = Path(__file__).resolve().parent.parent.parent
DATA_DIR: Final = ROOT / ".jobyard" / "profile-enqueue" / "pgdata"
INSERT_TRIGGERS: Final = ("jobs_parent_refs_ins", "jobs_ready_ins")
# The columns a single enqueue sets, by value; the second also sends the enqueue's NOTIFY.
INSERT: Final = """
INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at, max_attempts)
VALUES (%(project)s, %(queue)s, 'noop', '{}', 'queued', 0, now(), 5)
RETURNING id, queue_id"""
INSERT_NOTIFY: Final = """
WITH i AS (
    INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                      max_attempts)
    VALUES (%(project)s, %(queue)s, 'noop', '{}', 'queued', 0, now(), 5)
    RETURNING id, queue_id)
SELECT i.id, (SELECT count(pg_notify('jobyard_jobs', queue_id::text)) FROM i) FROM i"""
INSERT_ON_CONFLICT: Final = """
INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at, max_attempts)
VALUES (%(project)s, %(queue)s, 'noop', '{}', 'queued', 0, now(), 5)
ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, queue_id"""

Call = Callable[[], Awaitable[object]]


def log(message: str) -> None:
    print(f"[enqueue_split] {message}", file=sys.stderr, flush=True)


def variants(
    conn: Conn, project_id: ProjectId, queue_id: int
) -> dict[str, tuple[Call, tuple[str, ...]]]:
    """Each variant's call and the insert triggers it disables."""
    params = {"project": project_id, "queue": queue_id}

    def sql(text: str) -> Call:
        return lambda: conn.execute(text, params if "%(" in text else None)

    def sdk() -> Awaitable[object]:
        job = JobCreate(queue=scenarios.QUEUE, handler=scenarios.HANDLER)
        return enqueue.enqueue(conn, project_id, job, whole_job=False)

    return {
        "SELECT 1": (sql("SELECT 1"), ()),
        "bare insert": (sql("INSERT INTO bare_jobs DEFAULT VALUES RETURNING id"), ()),
        "jobs, triggers off": (sql(INSERT), INSERT_TRIGGERS),
        "jobs, no ready row": (sql(INSERT), ("jobs_ready_ins",)),
        "jobs, no reference check": (sql(INSERT), ("jobs_parent_refs_ins",)),
        "jobs": (sql(INSERT), ()),
        "jobs + NOTIFY": (sql(INSERT_NOTIFY), ()),
        "jobs + ON CONFLICT": (sql(INSERT_ON_CONFLICT), ()),
        "core.enqueue.enqueue": (sdk, ()),
    }


async def _switch(admin: Conn, triggers: tuple[str, ...], on: bool) -> None:
    for trigger in triggers:
        await admin.execute(f"ALTER TABLE jobs {'ENABLE' if on else 'DISABLE'} TRIGGER {trigger}")


async def measure(url: str, rounds: int, calls: int) -> dict[str, list[float]]:
    conn = await connect(url, autocommit=True)
    admin = await connect(url, autocommit=True)
    try:
        project_id, queue = await scenarios._setup(conn)
        await conn.execute(
            "CREATE TABLE bare_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            " payload jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now())"
        )
        table = variants(conn, project_id, queue.id)
        results: dict[str, list[float]] = {name: [] for name in table}
        for r in range(rounds):
            order = list(table) if r % 2 == 0 else list(reversed(table))
            for name in order:
                call, disabled = table[name]
                await _switch(admin, disabled, on=False)
                try:
                    started = time.perf_counter()
                    for _ in range(calls):
                        await call()
                    results[name].append((time.perf_counter() - started) / calls * 1e6)
                finally:
                    await _switch(admin, disabled, on=True)
            log(f"round {r + 1}/{rounds} done")
        return results
    finally:
        await conn.close()
        await admin.close()


def table(results: dict[str, list[float]], rounds: int, calls: int) -> str:
    floor = statistics.median(results["bare insert"])
    lines = [
        f"Medians of {rounds} rounds of {calls:,} calls, µs a call (min–max of the rounds):",
        "",
        "| variant | µs a call | × bare insert |",
        "|---|---:|---:|",
    ]
    for name, values in results.items():
        mid = statistics.median(values)
        lines.append(
            f"| {name} | {mid:.0f} ({min(values):.0f}–{max(values):.0f}) | {mid / floor:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=800)
    args = parser.parse_args()
    admin_url = start_with(DATA_DIR, {})
    try:
        template = testing.ensure_template(admin_url)
        clone = testing.create_clone(admin_url, template, "jy_enqueue_")
        try:
            results = asyncio.run(measure(clone, args.rounds, args.calls))
        finally:
            testing.drop_database(admin_url, clone)
    finally:
        embedded.stop(DATA_DIR)
    print(table(results, args.rounds, args.calls))


if __name__ == "__main__":
    main()
