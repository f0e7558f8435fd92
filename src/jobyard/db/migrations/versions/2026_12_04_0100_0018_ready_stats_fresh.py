"""job_ready_refresh_stats: the ready partitions are analyzed as soon as a backlog lands in them.

The claim reads `job_ready` in claim order through `job_ready_N_claim_idx` and locks each
candidate's `jobs` row in a filter of that scan, so that LIMIT stops after n rows. How the
planner reaches that order depends on the partition's statistics for `queue_id`. A partition
whose statistics are missing (a fresh database) or were taken before this queue's rows arrived (a
bulk enqueue, a new queue with a backlog) looks as if it held a hundred rows of the queue: the
planner then reads them all with a bitmap scan and sorts them, and the lock filter, below the
sort, locks every queued job of the queue on every claim. A 50,000-job drain measured 15 ms a
claim that way against 5.5 ms with fresh statistics, and 7,400 jobs/s against 11,400
(docs/BENCHMARKS.md).

Autovacuum fixes the statistics, but only on its next visit (`autovacuum_naptime`, a minute by
default), and a burst is claimed long before that. `job_ready_refresh_stats(min_changes)` runs
`ANALYZE (SKIP_LOCKED)` on every partition whose changes since its last analyze reach
`min_changes` and a tenth of its rows (autovacuum's own default scale), unless it was analyzed
(by this or by autovacuum) less than `min_interval_s` ago: workers and the scheduler call it
beside the rotation, about once a second, so the first claims after a burst already plan on the
index. When there is nothing to do it reads a few counters. A role that may
not analyze the partitions gets a warning from ANALYZE and the function goes on, leaving them to
autovacuum as before.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04 01:00
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION job_ready_refresh_stats(
    min_changes integer DEFAULT 2000, min_interval_s double precision DEFAULT 10
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part regclass;
    analyzed integer := 0;
BEGIN
    FOR part IN
        SELECT c.oid::regclass
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'job_ready'::regclass
          AND pg_stat_get_mod_since_analyze(c.oid)
              >= greatest(min_changes, 0.1 * c.reltuples)
          -- A drain deletes as fast as a burst inserted: without a pause between two analyzes
          -- of one partition, a 50,000-job drain analyzed it six times in four seconds.
          AND coalesce(greatest(pg_stat_get_last_analyze_time(c.oid),
                                pg_stat_get_last_autoanalyze_time(c.oid)), '-infinity')
              < clock_timestamp() - make_interval(secs => min_interval_s)
        ORDER BY c.relname
    LOOP
        -- SKIP_LOCKED: a partition that autovacuum (or another worker) is analyzing right now
        -- is passed over rather than waited for.
        EXECUTE format('ANALYZE (SKIP_LOCKED) %s', part);
        analyzed := analyzed + 1;
    END LOOP;
    RETURN analyzed;
END $$;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP FUNCTION job_ready_refresh_stats(integer, double precision)")
