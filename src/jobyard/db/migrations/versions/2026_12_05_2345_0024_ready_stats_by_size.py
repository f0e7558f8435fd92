"""job_ready_refresh_stats: a partition that has grown to twice its analyzed size is analyzed too.

Migration 0018 analyzes a ready partition once its change counters show a backlog. Those
counters are published by the backend that wrote the rows, and a backend publishes at most once a
second, or ten seconds later if it goes idle right after its commit. So a bulk enqueue that
lands less than a second before a worker starts (every drain benchmark: fill, then start the
workers) is claimed on the statistics from before it: the planner sorts the whole backlog and the
claim's lock filter, below the sort, locks every job in it on every claim. Measured on a 20,000-job
2-process drain: the first 0.8 s ran at about 4,000 jobs/s and the rest at 23,000
(docs/BENCHMARKS.md, "The first second of a drain").

The partition's size on disk has no such delay: its file grows as the rows are written. The
function now also analyzes a partition whose size in pages is at least twice `relpages` (what the
last ANALYZE saw) and at least `min_changes` rows' worth (a ready row takes about 60 bytes, so
128 to a page is a low count). The pause between two analyzes of one partition (`min_interval_s`)
applies to both rules. Growth by dead rows under a held horizon also doubles a partition's size;
the counters already analyze it then (inserts count as changes), so this adds no analyze there.
TRUNCATE keeps `relpages`, so after a rotation a partition must outgrow its last analyzed size
twice over before the size alone triggers; the counters remain the rule for that case.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-05 23:45
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

FUNCTION = r"""
CREATE OR REPLACE FUNCTION job_ready_refresh_stats(
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
          AND (pg_stat_get_mod_since_analyze(c.oid)
                   >= greatest(min_changes, 0.1 * c.reltuples)
               -- The counters above reach this session up to ten seconds after the writer's
               -- commit; the file's size at once.
               OR pg_relation_size(c.oid) / current_setting('block_size')::integer
                   >= greatest(2 * c.relpages, min_changes / 128))
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

# Migration 0018's function, word for word: the change counters only.
DOWNGRADE = r"""
CREATE OR REPLACE FUNCTION job_ready_refresh_stats(
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
    op.execute(FUNCTION)


def downgrade() -> None:
    op.execute(DOWNGRADE)
