"""Index entries the claims read per job, sampled beside a `jobyard bench --scenario` run.

    .venv/bin/python benchmarks/pressure/claim_index_reads.py HOST OUTPUT.jsonl SECONDS

HOST is the bench server's socket directory (`.jobyard/bench-pgdata` of the checkout that runs
the bench). The script waits for the run's `jy_bench_*` database, then every 5 s appends one
JSON line: the wall clock, `idx_tup_read` and the index buffers (hit + read) of the ready
partitions' claim indexes (`job_ready_N_claim_idx`) and claim-position indexes
(`job_ready_N_after_idx`, migrations 0014–0026; from 0027 on both claims read the claim index
and the `after_*` counts stay 0), and the rows inserted into `job_executions` (runs finished).
Differences between two lines give the entries read per job claimed, which load on the host
does not blur (docs/BENCHMARKS.md, "Readers cell A/B").

A session's counters reach these views when it is idle after a transaction, so the readers'
own index-only counts arrive all at once when their transactions end: compare lines taken
before the release.
"""

from __future__ import annotations

import json
import sys
import time

import psycopg

QUERY = """
SELECT
  coalesce(sum(s.idx_tup_read) FILTER (WHERE s.indexrelname LIKE 'job\\_ready\\_%%\\_claim\\_idx'),
           0) AS claim_tup,
  coalesce(sum(s.idx_tup_read) FILTER (WHERE s.indexrelname LIKE 'job\\_ready\\_%%\\_after\\_idx'),
           0) AS after_tup,
  coalesce(sum(io.idx_blks_hit + io.idx_blks_read)
           FILTER (WHERE s.indexrelname LIKE 'job\\_ready\\_%%\\_claim\\_idx'), 0) AS claim_blks,
  coalesce(sum(io.idx_blks_hit + io.idx_blks_read)
           FILTER (WHERE s.indexrelname LIKE 'job\\_ready\\_%%\\_after\\_idx'), 0) AS after_blks,
  (SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'job_executions') AS runs
FROM pg_stat_user_indexes s JOIN pg_statio_user_indexes io USING (indexrelid)
WHERE s.relname LIKE 'job\\_ready\\_%%'
"""


def _bench_database(host: str, deadline: float) -> str | None:
    while time.time() < deadline:
        try:
            with psycopg.connect(f"postgresql://postgres@/postgres?host={host}") as conn:
                row = conn.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE 'jy\\_bench\\_%'"
                    " ORDER BY oid DESC LIMIT 1"
                ).fetchone()
                if row is not None:
                    return str(row[0])
        except psycopg.OperationalError:
            pass  # the server is not up yet
        time.sleep(1)
    return None


def main() -> None:
    host, output, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    deadline = time.time() + seconds
    database = _bench_database(host, deadline)
    if database is None:
        sys.exit("no jy_bench_* database appeared")
    url = f"postgresql://postgres@/{database}?host={host}"
    with psycopg.connect(url, autocommit=True) as conn, open(output, "w") as out:
        while time.time() < deadline:
            try:
                row = conn.execute(QUERY).fetchone()
            except psycopg.Error:
                break  # the bench dropped its database
            assert row is not None
            names = ("claim_tup", "after_tup", "claim_blks", "after_blks", "runs")
            counts = {k: int(v or 0) for k, v in zip(names, row, strict=True)}
            sample = {"wall": time.time(), **counts}
            out.write(json.dumps(sample) + "\n")
            out.flush()
            time.sleep(5)


if __name__ == "__main__":
    main()
