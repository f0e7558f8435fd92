"""The ready set's trigger reads `job_ready` by key in every statement, as the held set's does.

`jobs_ready_sync` deleted by key since 0016, but two of its statements were still joins planned
from the `job_ready` partitions' statistics: the UPDATE of jobs that stay queued in a new order
(`… FROM new_jobs n WHERE r.job_id = n.id`) and the INSERT of jobs that enter `queued` (`NOT
EXISTS (SELECT FROM job_ready r WHERE r.job_id = n.id)`). Under a held xmin horizon a partition
keeps the dead rows of every job claimed from it, and once VACUUM has recorded it as holding
(almost) no live row the planner walks each partition's job index whole, as a filter, for every
job of the statement: 150,000 heap fetches for fifty released jobs over 3,000 dead rows a
partition (tests/db/test_ready_sync_by_key.py), the held set's stall of migration 0031 on the
path of releases, retries coming due, promotions and released dependants. A claim or a completion
never reaches these two statements with a row to write, so the pressure scenarios did not show it.

The update branch now learns what changed from the transition tables alone and touches
`job_ready` only by key (`r.job_id = ANY (ARRAY(…))`, an InitPlan computed once a statement):
after the DELETE of jobs that left `queued` (a claim leaves there), one statement finds the jobs
that entered `queued` or stayed queued in a new order (a hash join of `new_jobs` with `old_jobs`),
deletes their old ready rows by key and inserts their new ones in the ring's current partition.
Keeping the UPDATE's join and adding the key array to it was tried: the planner still looped
over `new_jobs` and rescanned every partition once a job (docs/TESTING.md).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-07 01:30
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE OR REPLACE FUNCTION jobs_ready_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE job_ready;
        RETURN NULL;
    END IF;
    -- The ring's current partition (0025), read without MVCC, so always the newest; read in
    -- the INSERTs that use it (0026): a claim or a completion inserts no ready row.
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_ready (slot, job_id, queue_id, priority, run_at, suspect)
        SELECT (SELECT (last_value % 3)::smallint FROM job_ready_ring),
               n.id, n.queue_id, n.priority, n.run_at, n.suspect
        FROM new_jobs n WHERE n.status = 'queued';
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM job_ready r
        WHERE r.job_id = ANY (ARRAY(SELECT g.id FROM gone g WHERE g.status = 'queued'));
    ELSE
        -- Most updates (complete, fail, heartbeat, progress) touch no queued row: leave early.
        IF NOT EXISTS (SELECT FROM old_jobs WHERE status = 'queued')
           AND NOT EXISTS (SELECT FROM new_jobs WHERE status = 'queued') THEN
            RETURN NULL;
        END IF;
        -- Every statement below reads job_ready by key only (= ANY (ARRAY(...)), migrations
        -- 0016 and 0032): a join with it would be planned from the partitions' statistics,
        -- which under a held horizon call a partition of dead rows empty, and walk its index
        -- for every job. What changed is read from the transition tables alone.
        -- Left 'queued' (claim, cancel, dependency cancel).
        DELETE FROM job_ready r
        WHERE r.job_id = ANY (ARRAY(SELECT n.id FROM new_jobs n WHERE n.status <> 'queued'));
        IF NOT EXISTS (SELECT FROM new_jobs WHERE status = 'queued') THEN
            RETURN NULL;  -- a claim: nothing enters or stays queued
        END IF;
        -- Entered 'queued' (retry, requeue, promotion, release of dependants, replay, run-now),
        -- or still queued but ordered or filtered differently: its ready row is written anew,
        -- the old one (if any) deleted by key in the same statement. One join of the two
        -- transition tables, with a single-table filter on one side only, so that the planner
        -- hashes it rather than loop over both (a statement can change 200,000 jobs).
        WITH moved AS MATERIALIZED (
            SELECT n.id, n.queue_id, n.priority, n.run_at, n.suspect
            FROM new_jobs n JOIN old_jobs o ON o.id = n.id
            WHERE n.status = 'queued'
              AND (o.status <> 'queued'
                   OR (n.queue_id, n.priority, n.run_at, n.suspect)
                      IS DISTINCT FROM (o.queue_id, o.priority, o.run_at, o.suspect))
        ), replaced AS (
            DELETE FROM job_ready r WHERE r.job_id = ANY (ARRAY(SELECT m.id FROM moved m))
        )
        INSERT INTO job_ready (slot, job_id, queue_id, priority, run_at, suspect)
        SELECT (SELECT (last_value % 3)::smallint FROM job_ready_ring),
               m.id, m.queue_id, m.priority, m.run_at, m.suspect
        FROM moved m;
    END IF;
    RETURN NULL;
END $$;
"""

_DOMAINS_0026 = "jobyard.db.migrations.versions.2026_12_06_0700_0026_jobs_column_domains"


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    # 0026's jobs_ready_sync, as it was.
    op.execute(importlib.import_module(_DOMAINS_0026)._ready_sync())
