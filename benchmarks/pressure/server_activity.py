"""What the server is doing, sampled every second beside a `jobyard bench --scenario` run.

    .venv/bin/python benchmarks/pressure/server_activity.py sample HOST OUTPUT.jsonl SECONDS
    .venv/bin/python benchmarks/pressure/server_activity.py windows OUTPUT.jsonl BENCH.json

`sample`: HOST is the bench server's socket directory (`.jobyard/bench-pgdata` of the checkout
that runs the bench). Every second it appends one JSON line: the wall clock, the active client
backends by wait event (`CPU` when they wait on nothing), the checkpointer's wait event, and
the autovacuum workers' VACUUM and ANALYZE progress by table. It follows the bench from its
calibration database to its run database (the newest `jy_bench_*`).

`windows`: splits the run's 2-second windows (its saved JSON, docs/bench/<name>.json) by
whether an autovacuum or autoanalyze of `jobs` or `job_executions` was running during the
window, and prints each phase's count, median and worst window p99 for both groups: which
share of a phase's slow windows the history tables' upkeep accounts for
(docs/BENCHMARKS.md, "Held horizon A/B").
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from datetime import datetime
from typing import Any

import psycopg

HISTORY = ("jobs", "job_executions")

NEWEST_BENCH_DATABASE = (
    "SELECT datname FROM pg_database WHERE datname LIKE 'jy\\_bench\\_%' ORDER BY oid DESC LIMIT 1"
)
WAITS = """
SELECT backend_type, coalesce(wait_event_type || ':' || wait_event, 'CPU') AS wait, count(*)
FROM pg_stat_activity
WHERE pid <> pg_backend_pid()
  AND ((backend_type = 'client backend' AND state = 'active') OR backend_type = 'checkpointer')
GROUP BY 1, 2
"""
VACUUMS = "SELECT relid::regclass::text, phase FROM pg_stat_progress_vacuum"
ANALYZES = "SELECT relid::regclass::text, phase FROM pg_stat_progress_analyze"


def _connect(host: str) -> psycopg.Connection[Any]:
    # An absolute path: libpq reads a host that starts with "/" as a socket directory.
    socket_dir = os.path.abspath(host)
    with psycopg.connect(host=socket_dir, user="postgres", dbname="postgres") as admin:
        row = admin.execute(NEWEST_BENCH_DATABASE).fetchone()
    if row is None:
        raise LookupError("no jy_bench_* database yet")
    return psycopg.connect(host=socket_dir, user="postgres", dbname=row[0], autocommit=True)


def sample(host: str, output: str, seconds: float) -> None:
    deadline = time.time() + seconds
    conn: psycopg.Connection[Any] | None = None
    with open(output, "w") as out:
        while time.time() < deadline:
            started = time.time()
            try:
                if conn is None:
                    conn = _connect(host)
                line = {
                    "wall": started,
                    "waits": conn.execute(WAITS).fetchall(),
                    "vacuum": conn.execute(VACUUMS).fetchall(),
                    "analyze": conn.execute(ANALYZES).fetchall(),
                }
                out.write(json.dumps(line) + "\n")
                out.flush()
            except (psycopg.Error, LookupError):
                # Not up yet, or the bench dropped its calibration database: find the next one.
                conn = None
            time.sleep(max(0.0, 1.0 - (time.time() - started)))


def _history_upkeep_at(samples: list[dict[str, Any]], start: float, end: float) -> bool:
    return any(
        table in HISTORY
        for s in samples
        if start - 1 <= s["wall"] <= end + 1
        for table, _phase in s["vacuum"] + s["analyze"]
    )


def windows(samples_path: str, bench_path: str) -> None:
    with open(samples_path) as f:
        samples = [json.loads(line) for line in f]
    with open(bench_path) as f:
        run = json.load(f)
    origin = datetime.fromisoformat(run["samples"][0]["at"]).timestamp()

    def describe(p99s: list[float]) -> str:
        if not p99s:
            return "none"
        slow = sum(p > 100 for p in p99s)
        return (
            f"{len(p99s)} windows, median {statistics.median(p99s):.0f} ms, "
            f"worst {max(p99s):.0f} ms, {slow} over 100 ms"
        )

    for phase in ("baseline", "hold", "recovery"):
        busy: list[float] = []
        quiet: list[float] = []
        for w in run["windows"]:
            if w["phase"] == phase:
                start = origin + w["start_s"]
                during = _history_upkeep_at(samples, start, start + 2)
                (busy if during else quiet).append(w["p99_ms"])
        print(f"{phase}: autovacuum of the history: {describe(busy)}; none: {describe(quiet)}")


def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    if command == "sample":
        sample(args[0], args[1], float(args[2]))
    elif command == "windows":
        windows(args[0], args[1])
    else:
        sys.exit(f"unknown command {command!r}: use sample or windows")


if __name__ == "__main__":
    main()
