"""A claim is a HOT update: no index of `jobs` names a column the claim changes.

PostgreSQL updates a row in place on its page (a heap-only tuple, HOT) when no indexed column
changes and the page has room; otherwise the new version gets an entry in every index of the
table. The claim changes `status`, `worker_id`, `lock_expires_at` and the run's columns, and
three indexes named two of them, so every claim wrote a new entry into all nine indexes of
`jobs`: the largest single cost of a drain on the server side, and under a held xmin horizon
entries that no vacuum may remove (docs/BENCHMARKS.md, "the HOT claim and completion, measured
as schema experiments"; migration 0029 moved the readers of `jobs_held_idx` off `jobs`).

- `status_group`, a stored generated column: the status, except that `queued`, `claimed` and
  `running` share one value (`queued`, the group's first state; `job_status_group()`). It
  replaces `status` in the explorer's index (`jobs_project_group_idx`, same shape as
  `jobs_project_status_idx` was) and in the promoter's (`jobs_due_idx`). A claim changes
  `status` from `queued` to `claimed` and leaves `status_group` as it was, so PostgreSQL sees
  no indexed value change: no writer needs to know the column exists. A read by status names
  the group as well (`status_group = ANY (job_status_groups(...))`), which the index serves;
  counts of queued and held jobs come from `job_ready` and `job_held`, which mirror them.
- `jobs_worker_idx` goes. Its one reader was the null-out of a deleted worker's references,
  which now finds the worker's jobs through what it held (`job_held`), what it ran
  (`job_executions_worker_idx`: every path that takes a job out of a worker's hands records a
  run with that worker or clears `worker_id`) and `job_worker_refs`, where row triggers note
  every `worker_id` written other than by a claim (an import, a fixture, an operator's UPDATE).
  Their WHEN clauses are false for a claim and for every write that leaves `worker_id` alone,
  so the hot paths call no function for them. Filled here for the jobs whose worker is in
  neither place.
- `fillfactor = 40` on `jobs`: a claim updates consecutive rows of a page in one statement, and
  each new version must fit on the same page to be HOT. Pages filled before this migration keep
  their density until they are rewritten; the history retention keeps takes more heap.

The completion still changes `status_group` (`queued` → `done`) and sets `finished_at`, so it writes
index entries as before; making it HOT too is a later step (docs/DATABASE.md).

Adding a stored generated column rewrites `jobs` under an ACCESS EXCLUSIVE lock: on a large
history this migration takes minutes, with no job claimed meanwhile.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06 19:00
"""

from __future__ import annotations

from alembic import op

from jobyard.db.migrations import earlier

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

_RUN_REFS_0003 = "jobyard.db.migrations.versions.2026_12_03_0800_0003_run_refs_per_statement"

UPGRADE = r"""
CREATE FUNCTION job_status_group(s job_status) RETURNS job_status
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN s IN ('claimed', 'running') THEN 'queued'::job_status ELSE s END;
COMMENT ON FUNCTION job_status_group(job_status) IS
    'the value jobs.status_group holds for a status: claimed and running share queued''s '
    '(migration 0030)';
CREATE FUNCTION job_status_groups(s job_status[]) RETURNS job_status[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ARRAY(SELECT DISTINCT job_status_group(x) FROM unnest(s) x);
COMMENT ON FUNCTION job_status_groups(job_status[]) IS
    'the status_group values of a set of statuses: what a read by status names for the index';

-- Before jobs_worker_idx goes: the references neither the held set nor the runs account for.
CREATE TABLE job_worker_refs (
    job_id bigint NOT NULL,
    worker_id bigint NOT NULL
);
COMMENT ON TABLE job_worker_refs IS
    'jobs.worker_id values written other than by a claim: with job_held and job_executions, '
    'how workers_null_refs() finds a deleted worker''s jobs without an index on jobs (0030)';
CREATE INDEX job_worker_refs_worker_idx ON job_worker_refs (worker_id);
INSERT INTO job_worker_refs (job_id, worker_id)
SELECT j.id, j.worker_id
FROM jobs j
WHERE j.worker_id IS NOT NULL
  AND NOT EXISTS (SELECT FROM job_held h WHERE h.job_id = j.id AND h.worker_id = j.worker_id)
  AND NOT EXISTS (SELECT FROM job_executions e
                  WHERE e.job_id = j.id AND e.worker_id = j.worker_id);

CREATE FUNCTION jobs_worker_ref_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_worker_refs (job_id, worker_id) VALUES (NEW.id, NEW.worker_id);
    RETURN NULL;
END $$;
-- A claim (into claimed/running, from any other state) is the held set's to record.
CREATE TRIGGER jobs_worker_ref_note_ins AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.worker_id IS NOT NULL AND NEW.status NOT IN ('claimed', 'running'))
    EXECUTE FUNCTION jobs_worker_ref_note();
CREATE TRIGGER jobs_worker_ref_note_upd AFTER UPDATE OF worker_id ON jobs FOR EACH ROW
    WHEN (NEW.worker_id IS NOT NULL AND NEW.worker_id IS DISTINCT FROM OLD.worker_id
          AND NOT (NEW.status IN ('claimed', 'running')
                   AND OLD.status NOT IN ('claimed', 'running')))
    EXECUTE FUNCTION jobs_worker_ref_note();

ALTER TABLE jobs ADD COLUMN status_group job_status
    GENERATED ALWAYS AS (job_status_group(status)) STORED;
COMMENT ON COLUMN jobs.status_group IS
    'status, with claimed and running as queued: what the indexes name instead of status, so '
    'a claim changes no indexed value and is a HOT update (migration 0030)';

DROP INDEX jobs_project_status_idx;
DROP INDEX jobs_scheduled_idx;
DROP INDEX jobs_worker_idx;
CREATE INDEX jobs_project_group_idx ON jobs (project_id, status_group, id DESC)
    INCLUDE (queue_id, run_at);
CREATE INDEX jobs_due_idx ON jobs (run_at) WHERE status_group = 'scheduled';
ALTER TABLE jobs SET (fillfactor = 40);

CREATE OR REPLACE FUNCTION workers_null_refs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE jobs SET worker_id = NULL WHERE worker_id IS NOT NULL;
        UPDATE job_executions SET worker_id = NULL WHERE worker_id IS NOT NULL;
        DELETE FROM job_worker_refs;
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT FROM gone) THEN
        RETURN NULL;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE serialization_failure USING
            MESSAGE = 'delete workers (or their project) under READ COMMITTED';
    END IF;
    -- No index of jobs names worker_id (a claim sets it): a worker's jobs are the ones it holds,
    -- the ones it ran and the ones written with it otherwise, each found by index, then updated
    -- by key.
    UPDATE jobs SET worker_id = NULL
    WHERE id = ANY (ARRAY(
              SELECT h.job_id FROM job_held h WHERE h.worker_id = ANY (ARRAY(SELECT id FROM gone))
              UNION
              SELECT e.job_id FROM job_executions e
              WHERE e.worker_id = ANY (ARRAY(SELECT id FROM gone))
              UNION
              SELECT r.job_id FROM job_worker_refs r
              WHERE r.worker_id = ANY (ARRAY(SELECT id FROM gone))))
      AND worker_id = ANY (ARRAY(SELECT id FROM gone));
    UPDATE job_executions SET worker_id = NULL WHERE worker_id = ANY (ARRAY(SELECT id FROM gone));
    DELETE FROM job_worker_refs WHERE worker_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END $$;
"""

DOWNGRADE = r"""
ALTER TABLE jobs RESET (fillfactor);
DROP INDEX jobs_project_group_idx;
DROP INDEX jobs_due_idx;
ALTER TABLE jobs DROP COLUMN status_group;
DROP FUNCTION job_status_groups(job_status[]), job_status_group(job_status);
CREATE INDEX jobs_project_status_idx ON jobs (project_id, status, id DESC) INCLUDE (queue_id, run_at);
CREATE INDEX jobs_scheduled_idx ON jobs (run_at) WHERE status = 'scheduled';
CREATE INDEX jobs_worker_idx ON jobs (worker_id) WHERE worker_id IS NOT NULL;
DROP TRIGGER jobs_worker_ref_note_ins ON jobs;
DROP TRIGGER jobs_worker_ref_note_upd ON jobs;
DROP FUNCTION jobs_worker_ref_note();
DROP TABLE job_worker_refs;
"""


def _workers_null_refs_0003() -> str:
    return earlier.replaced_function(_RUN_REFS_0003, "CREATE FUNCTION workers_null_refs()")


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
    op.execute(_workers_null_refs_0003())
