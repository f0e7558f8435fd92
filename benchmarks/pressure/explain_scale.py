"""The claim's plan, rows and buffers as finished jobs pile up (docs/DATABASE.md, "The ready set").

    .venv/bin/python benchmarks/pressure/explain_scale.py [--finished 0,1000000,3000000]
        [--queued 1000] [--runs 5]

One throwaway database cloned from the migrated template of the code on PYTHONPATH. For each
size it adds finished jobs up to that many (as `done`, in 500,000-row statements), keeps
`--queued` claimable jobs, VACUUM ANALYZEs, then EXPLAIN (ANALYZE, BUFFERS)s the real
`job_claim_batch` (n = 10) `--runs` times, each rolled back, and prints the picking subtree's
plan path, rows read, shared buffers and the median execution time.
"""

from __future__ import annotations

import argparse
import os
import statistics

from jobyard.db import explain, testing
from jobyard.db.pool import connect_sync
from jobyard.db.queries import QUERIES

STEP = 500_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", default="0,1000000,3000000")
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    admin = testing.server_url(os.environ.get("JOBYARD_TEST_DATABASE_URL"))
    url = testing.create_clone(admin, testing.ensure_template(admin), prefix="jy_scale_")
    try:
        with connect_sync(url) as conn:
            ids = conn.execute(
                """WITH o AS (INSERT INTO organizations (name, slug) VALUES ('s', 's')
                              RETURNING id),
                        p AS (INSERT INTO projects (org_id, name, slug)
                              SELECT id, 's', 's' FROM o RETURNING id),
                        q AS (INSERT INTO queues (project_id, name)
                              SELECT id, 'scale' FROM p RETURNING id, project_id),
                        w AS (INSERT INTO workers (project_id, name, concurrency)
                              SELECT id, 'w', 10 FROM p RETURNING id)
                   SELECT q.id AS queue_id, q.project_id, w.id AS worker_id FROM q, w"""
            ).fetchone()
            assert ids is not None
            conn.execute(
                """INSERT INTO jobs (project_id, queue_id, handler, status, run_at)
                   SELECT %s, %s, 'noop', 'queued', now() + g * interval '1 ms'
                   FROM generate_series(1, %s) g""",
                (ids["project_id"], ids["queue_id"], args.queued),
            )
            have = 0
            print("| finished jobs | picking path | rows read | buffers | median ms |")
            print("|---:|---|---:|---:|---:|")
            for target in (int(x) for x in args.finished.split(",")):
                while have < target:
                    n = min(STEP, target - have)
                    # Jobs that went through the claim: queued first, then finished.
                    conn.execute(
                        """WITH j AS (
                               INSERT INTO jobs (project_id, queue_id, handler, status, run_at)
                               SELECT %s, %s, 'noop', 'queued', now() - interval '1 day'
                               FROM generate_series(1, %s) RETURNING id)
                           UPDATE jobs SET status = 'done', finished_at = now()
                           WHERE id IN (SELECT id FROM j)""",
                        (ids["project_id"], ids["queue_id"], n),
                    )
                    have += n
                conn.execute("VACUUM ANALYZE jobs")
                if conn.execute("SELECT to_regclass('job_ready') AS r").fetchone() != {"r": None}:
                    conn.execute("VACUUM ANALYZE job_ready")
                params = {
                    "queue_id": ids["queue_id"],
                    "worker_id": ids["worker_id"],
                    "n": 10,
                    "lease_s": 30.0,
                    "start": True,
                    "solo": False,
                    "limited": False,
                    "now": None,
                    "project_id": ids["project_id"],
                }
                text = QUERIES["job_claim_batch"].sql
                samples = []
                for _ in range(args.runs + 1):  # the first warms the caches
                    samples.append(explain._explain_once(conn, text, params))
                stats = [explain.plan_stats(s, subtree="CTE picked") for s in samples[1:]]
                last = stats[-1]
                ms = statistics.median(s.execution_ms for s in stats)
                path = " → ".join(last.node_path)
                print(
                    f"| {have:,} | {path} | {last.rows_read} "
                    f"| {last.shared_hit + last.shared_read} | {ms:.2f} |",
                    flush=True,
                )
    finally:
        testing.drop_database(admin, url)


if __name__ == "__main__":
    main()
