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

With `--pgqueuer` every round also runs PgQueuer's single enqueue (`Queries.enqueue`) and the
same bare insert, both sent by asyncpg (benchmarks/peers/pgqueuer/enqueue_calls.py, in the peer
venv that `make bench-peers` builds) on a database of the same server, as one more step of the
turns: what PgQueuer's enqueue costs above the floor, and what the client library changes.

The server loads pg_stat_statements (`track = all`): for every variant the table also gives the
server's execution time a call, of the statement itself (top level, its triggers included) and
of the statements its triggers ran (nested). The bookkeeping costs every variant alike.

`--profile VARIANT` runs only that variant, `--calls` times, and names its server process on
stderr, for a profiler beside it (`perf record -g --call-graph dwarf -p PID`).

Disabling a trigger takes `ALTER TABLE` between rounds, on this clone only. Written for issue 15
point 3 (docs/BENCHMARKS.md, "A single enqueue, split").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
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
PEER_PYTHON: Final = ROOT / ".jobyard" / "peers" / "pgqueuer" / "venv" / "bin" / "python"
PEER_SCRIPT: Final = ROOT / "benchmarks" / "peers" / "pgqueuer" / "enqueue_calls.py"
# The profile server's own settings (a restart the first time): per-statement server time.
SERVER_SETTINGS: Final = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
}
# Execution time of this database's statements since the last reset, top level and nested, ms.
SERVER_TIME: Final = """
SELECT coalesce(sum(total_exec_time) FILTER (WHERE toplevel), 0) AS top,
       coalesce(sum(total_exec_time) FILTER (WHERE NOT toplevel), 0) AS nested
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"""
PEER_VARIANTS: Final = {
    "pgqueuer_us": "PgQueuer enqueue (asyncpg)",
    "bare_us": "bare insert (asyncpg)",
}
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


class Peer:
    """PgQueuer's side of the turns: a database of its own on the same server."""

    def __init__(self, admin_url: str) -> None:
        self._workdir = DATA_DIR.parent / "pgqueuer"
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.url = self._run("--url", admin_url, "--setup").strip()

    def _run(self, *args: str) -> str:
        out = subprocess.run(  # noqa: S603 - the peer venv's interpreter and our script
            [str(PEER_PYTHON), str(PEER_SCRIPT), "--workdir", str(self._workdir), *args],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout

    def round(self, calls: int, round_no: int) -> dict[str, float]:
        parsed: dict[str, float] = json.loads(
            self._run("--url", self.url, "--calls", str(calls), "--round", str(round_no))
        )
        return {PEER_VARIANTS[key]: value for key, value in parsed.items()}


async def _prepare(conn: Conn, admin: Conn) -> dict[str, tuple[Call, tuple[str, ...]]]:
    """The clone's project, queue and bare table; the variants, calling on `conn`."""
    await admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    project_id, queue = await scenarios._setup(conn)
    await conn.execute(
        "CREATE TABLE bare_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " payload jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now())"
    )
    return variants(conn, project_id, queue.id)


async def run_one(url: str, name: str, calls: int) -> None:
    """`calls` calls of one variant, after printing its server process's pid to stderr: a
    steady load to profile from beside it (`perf record -g -p PID`)."""
    conn = await connect(url, autocommit=True)
    admin = await connect(url, autocommit=True)
    try:
        table = await _prepare(conn, admin)
        if name not in table:
            raise SystemExit(f"--profile: one of {', '.join(table)}")
        call, disabled = table[name]
        await _switch(admin, disabled, on=False)
        cur = await conn.execute("SELECT pg_backend_pid() AS pid")
        row = await cur.fetchone()
        assert row is not None
        log(f"{name}: {calls:,} calls from server process {row['pid']}")
        for _ in range(calls):
            await call()
        await _switch(admin, disabled, on=True)
    finally:
        await conn.close()
        await admin.close()


Timings = dict[str, list[float]]
ServerTimes = dict[str, list[tuple[float, float]]]


async def measure(
    url: str, rounds: int, calls: int, peer: Peer | None = None
) -> tuple[Timings, ServerTimes]:
    """Wall µs a call of every variant by round, and the server's (top level, nested) µs a call
    of jobyard's variants."""
    conn = await connect(url, autocommit=True)
    admin = await connect(url, autocommit=True)
    try:
        table = await _prepare(conn, admin)
        results: Timings = {name: [] for name in table}
        server: ServerTimes = {name: [] for name in table}
        steps = [*table, *(["PgQueuer"] if peer else [])]
        for r in range(rounds):
            order = steps if r % 2 == 0 else list(reversed(steps))
            for name in order:
                if peer is not None and name == "PgQueuer":
                    for variant, value in peer.round(calls, r).items():
                        results.setdefault(variant, []).append(value)
                    continue
                call, disabled = table[name]
                await _switch(admin, disabled, on=False)
                try:
                    await admin.execute("SELECT pg_stat_statements_reset()")
                    started = time.perf_counter()
                    for _ in range(calls):
                        await call()
                    results[name].append((time.perf_counter() - started) / calls * 1e6)
                    cur = await admin.execute(SERVER_TIME)
                    row = await cur.fetchone()
                    assert row is not None
                    server[name].append((row["top"] * 1e3 / calls, row["nested"] * 1e3 / calls))
                finally:
                    await _switch(admin, disabled, on=True)
            log(f"round {r + 1}/{rounds} done")
        return results, server
    finally:
        await conn.close()
        await admin.close()


def table(results: Timings, server: ServerTimes, rounds: int, calls: int) -> str:
    floor = statistics.median(results["bare insert"])
    lines = [
        f"Medians of {rounds} rounds of {calls:,} calls, µs a call (min–max of the rounds); the"
        " server's execution µs a call, top level (triggers included) and nested (the"
        " triggers' statements):",
        "",
        "| variant | µs a call | × bare insert | server, top level | server, nested |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, values in results.items():
        mid = statistics.median(values)
        spent = server.get(name)
        top, nested = (
            (
                f"{statistics.median(t for t, _ in spent):.0f}",
                f"{statistics.median(n for _, n in spent):.0f}",
            )
            if spent
            else ("—", "—")
        )
        lines.append(
            f"| {name} | {mid:.0f} ({min(values):.0f}–{max(values):.0f}) | {mid / floor:.2f}"
            f" | {top} | {nested} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=800)
    parser.add_argument("--pgqueuer", action="store_true", help="PgQueuer in the turns too")
    parser.add_argument(
        "--profile", metavar="VARIANT", help="only run VARIANT --calls times, for a profiler"
    )
    args = parser.parse_args()
    if args.pgqueuer and not PEER_PYTHON.exists():
        parser.error(f"{PEER_PYTHON} is missing: run `make bench-peers` once to build it")
    admin_url = start_with(DATA_DIR, SERVER_SETTINGS)
    try:
        template = testing.ensure_template(admin_url)
        clone = testing.create_clone(admin_url, template, "jy_enqueue_")
        try:
            if args.profile:
                asyncio.run(run_one(clone, args.profile, args.calls))
                return
            peer = Peer(admin_url) if args.pgqueuer else None
            results, server = asyncio.run(measure(clone, args.rounds, args.calls, peer))
        finally:
            testing.drop_database(admin_url, clone)
    finally:
        embedded.stop(DATA_DIR)
    print(table(results, server, args.rounds, args.calls))


if __name__ == "__main__":
    main()
