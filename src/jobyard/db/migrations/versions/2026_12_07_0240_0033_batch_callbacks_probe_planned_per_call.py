"""The completion's "has this batch callbacks?" probe is planned for each call, never from a plan
cached while `job_batches` was small.

`jobs_final_effects` (0013) asks, for every statement that finishes jobs of a batch, whether any
of their batches has callbacks: `EXISTS (SELECT FROM job_batches jb WHERE jb.id IN (…new_jobs…)
AND jb.callbacks <> '{}')`. The query takes no parameter, so PL/pgSQL plans it once per session
and keeps that plan until `job_batches` is invalidated (an ANALYZE, a VACUUM that changes its
size, DDL). Every batch enqueue adds a row to `job_batches`; a worker session that planned the
probe while the table held a few rows kept a sequential scan of it, with the JSONB comparison on
every row, for every completion afterwards. Under a held xmin horizon autovacuum spends its
workers on `jobs` and the ANALYZE that would have replaced the plan comes late: in the 80 % pressure
cell (15,454 jobs/s, 20 batch enqueues a second) that scan was a tenth of the server's CPU ten
minutes into the hold (perf call graphs, docs/BENCHMARKS.md), and it grows with every batch ever
enqueued until retention removes them. Reproduced without a hold: seven completions on a fresh
table, 20,000 batches added, and the next completion read all 20,005 rows (`Rows Removed by
Filter: 20005`).

The probe now runs through EXECUTE with the batch ids as a parameter: planned at each call from
the table's current size, it is a primary-key probe per batch id once the table is more than a
few pages. Planning it costs tens of microseconds a completion statement; the cached scan cost a
pass over every batch row.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-07 02:40
"""

from __future__ import annotations

from alembic import op

from jobyard.db.migrations import earlier

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

_BATCH_COUNTS_0013 = "jobyard.db.migrations.versions.2026_12_03_1800_0013_batch_counts_on_read"

_PROBE_0013 = """    IF NOT EXISTS (
        SELECT FROM job_batches jb
        WHERE jb.id IN (SELECT nj.batch_id FROM new_jobs nj WHERE nj.batch_id IS NOT NULL)
          AND jb.callbacks <> '{}'::jsonb)
    THEN
        RETURN NULL;
    END IF;
"""
_PROBE = """    -- Planned at each call (EXECUTE, migration 0033): a plan cached while job_batches was
    -- small scanned every batch row on every completion once the table had grown.
    EXECUTE 'SELECT EXISTS (SELECT FROM job_batches jb
                            WHERE jb.id = ANY ($1) AND jb.callbacks <> ''{}''::jsonb)'
        INTO has_callbacks
        USING ARRAY(SELECT DISTINCT nj.batch_id FROM new_jobs nj WHERE nj.batch_id IS NOT NULL);
    IF NOT has_callbacks THEN
        RETURN NULL;
    END IF;
"""
_DECLARE_0013 = "    woke bigint;\n"
_DECLARE = "    woke bigint;\n    has_callbacks boolean;\n"


def _final_effects_0013() -> str:
    """0013's jobs_final_effects, as it was."""
    return earlier.statement(_BATCH_COUNTS_0013, "CREATE OR REPLACE FUNCTION jobs_final_effects()")


def _final_effects() -> str:
    old = _final_effects_0013()
    assert old.count(_PROBE_0013) == 1 and old.count(_DECLARE_0013) == 1
    return old.replace(_PROBE_0013, _PROBE).replace(_DECLARE_0013, _DECLARE)


def upgrade() -> None:
    op.execute(_final_effects())


def downgrade() -> None:
    op.execute(_final_effects_0013())
