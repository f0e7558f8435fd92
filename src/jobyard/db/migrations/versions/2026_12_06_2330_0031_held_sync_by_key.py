"""The held set's trigger reads `job_held` by key, whatever its statistics say.

`jobs_held_sync` (0022, 0029) asked `NOT EXISTS (SELECT FROM job_held h WHERE h.job_id = n.id)`
for every job a claim made held, and deleted a completion's rows with `USING new_jobs n WHERE
h.job_id = n.id`: joins, planned from the statistics of the `job_held` partitions. Under a held
xmin horizon a partition fills with dead rows that nothing may remove, and the next autovacuum
pass records it as holding no live row. The planner then read each partition whole for every
job claimed, instead of probing `job_held_N_job_idx`: in the pressure scenario at 7,084 jobs/s,
one claim's trigger made 713,650 heap fetches (fifty walks of 14,000 dead entries), every claim
and completion took 30 times its usual time, and each autovacuum pass over `jobs` (which vacuums
and analyzes the held partitions right after) was followed by one to three seconds of stalled
pickups (docs/BENCHMARKS.md, "The stalls after autovacuum").

Both statements now name the keys as an array, as the ready set's trigger has since 0016:
`h.job_id = ANY (ARRAY(...))`, an index condition that the planner turns into one probe of each
partition's job index per key; the claim's new rows are those whose ids the probe did not find.
The reads of `job_held` are now computed once a statement (an InitPlan), never once a job: where
the planner still believes a partition empty it reads it by one sequential scan a statement.
Forcing the index there (`SET enable_seqscan = off` on the function, as `job_held_count` has)
was measured on PostgreSQL 18 and is not done: before PostgreSQL 18 a disabled scan is priced at
`disable_cost` (10¹⁰), and the ring's sequence, which has no other path, drowned every other
choice in the INSERT's plan (PostgreSQL 15 drained a test backlog in 15–48 s instead of 2.5 s).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-06 23:30
"""

from __future__ import annotations

from alembic import op

from jobyard.db.migrations import earlier

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE OR REPLACE FUNCTION jobs_held_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE job_held;
        RETURN NULL;
    END IF;
    -- Every read of job_held below is by key (= ANY (ARRAY(...)), migration 0031): a join
    -- would be planned from the partitions' statistics, which call a partition full of dead
    -- rows empty, and read it whole for every job.
    IF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT FROM gone WHERE status IN ('claimed', 'running')) THEN
            DELETE FROM job_held h WHERE h.job_id = ANY (ARRAY(SELECT g.id FROM gone g));
        END IF;
        RETURN NULL;
    END IF;
    -- Left a held state (completion, failure, retry, release, lease expiry, cancel).
    IF EXISTS (SELECT FROM old_jobs WHERE status IN ('claimed', 'running'))
       AND EXISTS (SELECT FROM new_jobs WHERE status NOT IN ('claimed', 'running')) THEN
        DELETE FROM job_held h
        WHERE h.job_id = ANY (ARRAY(SELECT n.id FROM new_jobs n
                                    WHERE n.status NOT IN ('claimed', 'running')));
    END IF;
    -- Entered one (a claim). Heartbeats and starts (held before and after) do neither. A job
    -- that has a row already (held before and after, in a statement that also claims) keeps it.
    IF EXISTS (SELECT FROM new_jobs WHERE status IN ('claimed', 'running'))
       AND EXISTS (SELECT FROM old_jobs WHERE status NOT IN ('claimed', 'running')) THEN
        INSERT INTO job_held (slot, job_id, queue_id, worker_id)
        SELECT (SELECT (last_value % 3)::smallint FROM job_held_ring), n.id, n.queue_id,
               n.worker_id
        FROM new_jobs n
        WHERE n.status IN ('claimed', 'running')
          AND n.id <> ALL (ARRAY(
              SELECT h.job_id FROM job_held h
              WHERE h.job_id = ANY (ARRAY(SELECT m.id FROM new_jobs m
                                          WHERE m.status IN ('claimed', 'running')))));
    END IF;
    RETURN NULL;
END $$;
"""

_HELD_0029 = "jobyard.db.migrations.versions.2026_12_06_1600_0029_held_set_for_every_queue"


def _function_0029() -> str:
    """0029's jobs_held_sync, as it was (CREATE OR REPLACE without SET clauses drops them)."""
    return earlier.statement(_HELD_0029, "CREATE OR REPLACE FUNCTION jobs_held_sync()")


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(_function_0029())
