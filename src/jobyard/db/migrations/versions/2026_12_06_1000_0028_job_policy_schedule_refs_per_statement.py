"""jobs.retry_policy_id and jobs.schedule_id are checked once per statement, like its other parents.

They were the last foreign keys on `jobs`. A key's check runs once per inserted row even when the
column is NULL, as it is in nearly every job (no API sets a job's own policy; only cron firings
set `schedule_id`): PostgreSQL opens the parent table and tests the row for NULL, twice a job.
`perf` on the server during batch enqueues put `RI_FKey_check_ins` at 5.6 % of the backend's
samples, and dropping the two keys took the backend's CPU per job from 12.9 to 11.8 µs (20
turns, docs/BENCHMARKS.md "What was changed for speed", item 20).

The statement trigger that already checks a job's queue and batch (0002) now reads both columns
in the same pass over the new rows and, only when some row names a policy or a schedule, locks
those parents FOR KEY SHARE as the keys did; errors keep the keys' names. The parent side is as
for batches and workers: deleting policies or schedules nulls the jobs' references (SET NULL),
refused outside READ COMMITTED; TRUNCATE does the same; a referenced id never changes.

- `scheduled_jobs` is no longer referenced by a key, so `TRUNCATE scheduled_jobs` is allowed
  without CASCADE, and nulls `jobs.schedule_id` (with CASCADE it used to truncate `jobs`).
- Deleting a policy still reads every job for its id (no index on `jobs.retry_policy_id`, as
  under the key: an index would cost every enqueue a predicate test for a column nothing sets).
  Deleting a schedule finds its jobs by `jobs_schedule_idx`.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-06 10:00
"""

from __future__ import annotations

from alembic import op

from jobyard.db.migrations import earlier

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

_REFS_0002 = "jobyard.db.migrations.versions.2026_12_03_0730_0002_jobs_queue_ref_per_statement"

UPGRADE = r"""
ALTER TABLE jobs DROP CONSTRAINT jobs_retry_policy_id_fkey,
                 DROP CONSTRAINT jobs_schedule_id_fkey;

-- FOR KEY SHARE on the rows of `parent` whose id is in `ids`, as a key check locks them; returns
-- one id that names no row, or NULL. Dynamic, so for references that few statements carry.
CREATE FUNCTION parents_lock_for_key(parent regclass, ids bigint[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    locked bigint;
    missing bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM (SELECT FROM %s WHERE id = ANY ($1) FOR KEY SHARE) l',
                   parent)
        INTO locked USING ids;
    IF locked < cardinality(ids) THEN
        EXECUTE format('SELECT w FROM unnest($1) w WHERE NOT EXISTS '
                       '(SELECT FROM %s p WHERE p.id = w) LIMIT 1', parent)
            INTO missing USING ids;
    END IF;
    RETURN missing;
END $$;

CREATE OR REPLACE FUNCTION jobs_parent_refs_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    pairs bigint;
    locked bigint;
    has_batch boolean;
    has_policy boolean := false;
    has_schedule boolean := false;
    batches bigint[];
    policies bigint[];
    schedules bigint[];
    bad_queue bigint;
    bad_project bigint;
    first_queue bigint;
    last_queue bigint;
    first_project bigint;
    last_project bigint;
    bad_batch bigint;
    bad_policy bigint;
    bad_schedule bigint;
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        -- An UPDATE that moves a job or changes a parent (the WHEN of jobs_parent_refs_upd).
        IF (NEW.queue_id, NEW.project_id) IS DISTINCT FROM (OLD.queue_id, OLD.project_id) THEN
            PERFORM FROM queues WHERE id = NEW.queue_id AND project_id = NEW.project_id
                FOR KEY SHARE;
            IF NOT FOUND THEN
                bad_queue := NEW.queue_id;
                bad_project := NEW.project_id;
            END IF;
        END IF;
        IF NEW.batch_id IS NOT NULL AND NEW.batch_id IS DISTINCT FROM OLD.batch_id THEN
            PERFORM FROM job_batches WHERE id = NEW.batch_id FOR KEY SHARE;
            bad_batch := CASE WHEN FOUND THEN NULL ELSE NEW.batch_id END;
        END IF;
        IF NEW.retry_policy_id IS NOT NULL
           AND NEW.retry_policy_id IS DISTINCT FROM OLD.retry_policy_id THEN
            bad_policy := parents_lock_for_key('retry_policies', ARRAY[NEW.retry_policy_id]);
        END IF;
        IF NEW.schedule_id IS NOT NULL AND NEW.schedule_id IS DISTINCT FROM OLD.schedule_id THEN
            bad_schedule := parents_lock_for_key('scheduled_jobs', ARRAY[NEW.schedule_id]);
        END IF;
    ELSE
        -- One pass over the new rows. The common case (every row of one queue: a single
        -- enqueue, a batch; no policy or schedule named) then costs one index lookup; several
        -- queues take the general path.
        SELECT min(queue_id), max(queue_id), min(project_id), max(project_id),
               bool_or(batch_id IS NOT NULL), bool_or(retry_policy_id IS NOT NULL),
               bool_or(schedule_id IS NOT NULL)
        INTO first_queue, last_queue, first_project, last_project, has_batch, has_policy,
             has_schedule
        FROM new_jobs;
        IF first_queue = last_queue AND first_project = last_project THEN
            PERFORM FROM queues WHERE id = first_queue AND project_id = first_project
                FOR KEY SHARE;
            IF NOT FOUND THEN
                bad_queue := first_queue;
                bad_project := first_project;
            END IF;
        ELSIF first_queue IS NOT NULL THEN
            SELECT count(*), count(q.id) INTO pairs, locked
            FROM (SELECT DISTINCT queue_id, project_id FROM new_jobs) w
            LEFT JOIN LATERAL (
                SELECT id FROM queues
                WHERE id = w.queue_id AND project_id = w.project_id FOR KEY SHARE) q ON true;
            IF locked < pairs THEN
                SELECT w.queue_id, w.project_id INTO bad_queue, bad_project
                FROM (SELECT DISTINCT queue_id, project_id FROM new_jobs) w
                WHERE NOT EXISTS (SELECT FROM queues q
                                  WHERE q.id = w.queue_id AND q.project_id = w.project_id)
                LIMIT 1;
            END IF;
        END IF;
        IF has_batch THEN
            SELECT array_agg(DISTINCT batch_id) INTO batches FROM new_jobs
            WHERE batch_id IS NOT NULL;
            SELECT count(*) INTO locked FROM (
                SELECT id FROM job_batches WHERE id = ANY (batches) FOR KEY SHARE) l;
            IF locked < cardinality(batches) THEN
                SELECT b INTO bad_batch FROM unnest(batches) b
                WHERE NOT EXISTS (SELECT FROM job_batches jb WHERE jb.id = b) LIMIT 1;
            END IF;
        END IF;
        IF has_policy THEN
            SELECT array_agg(DISTINCT retry_policy_id) INTO policies FROM new_jobs
            WHERE retry_policy_id IS NOT NULL;
            bad_policy := parents_lock_for_key('retry_policies', policies);
        END IF;
        IF has_schedule THEN
            SELECT array_agg(DISTINCT schedule_id) INTO schedules FROM new_jobs
            WHERE schedule_id IS NOT NULL;
            bad_schedule := parents_lock_for_key('scheduled_jobs', schedules);
        END IF;
    END IF;
    IF bad_queue IS NOT NULL THEN
        PERFORM missing_parent('jobs', 'jobs_queue_fkey', format(
            'Key (queue_id, project_id)=(%s, %s) is not present in table "queues".',
            bad_queue, bad_project));
    END IF;
    IF bad_batch IS NOT NULL THEN
        PERFORM missing_parent('jobs', 'jobs_batch_id_fkey', format(
            'Key (batch_id)=(%s) is not present in table "job_batches".', bad_batch));
    END IF;
    IF bad_policy IS NOT NULL THEN
        PERFORM missing_parent('jobs', 'jobs_retry_policy_id_fkey', format(
            'Key (retry_policy_id)=(%s) is not present in table "retry_policies".', bad_policy));
    END IF;
    IF bad_schedule IS NOT NULL THEN
        PERFORM missing_parent('jobs', 'jobs_schedule_id_fkey', format(
            'Key (schedule_id)=(%s) is not present in table "scheduled_jobs".', bad_schedule));
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER jobs_parent_refs_upd ON jobs;
CREATE TRIGGER jobs_parent_refs_upd
    AFTER UPDATE OF queue_id, project_id, batch_id, retry_policy_id, schedule_id ON jobs
    FOR EACH ROW
    WHEN ((NEW.queue_id, NEW.project_id) IS DISTINCT FROM (OLD.queue_id, OLD.project_id)
          OR (NEW.batch_id IS NOT NULL AND NEW.batch_id IS DISTINCT FROM OLD.batch_id)
          OR (NEW.retry_policy_id IS NOT NULL
              AND NEW.retry_policy_id IS DISTINCT FROM OLD.retry_policy_id)
          OR (NEW.schedule_id IS NOT NULL AND NEW.schedule_id IS DISTINCT FROM OLD.schedule_id))
    EXECUTE FUNCTION jobs_parent_refs_check();

-- The parents' side: ON DELETE SET NULL, as the keys did (and as for batches and workers). One
-- function for both parents, the jobs column named by the trigger's argument: dynamic SQL, since
-- policies and schedules are deleted rarely.
CREATE FUNCTION jobs_null_parent_ref() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    col text := TG_ARGV[0];
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        EXECUTE format('UPDATE jobs SET %I = NULL WHERE %I IS NOT NULL', col, col);
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT FROM gone) THEN
        RETURN NULL;
    END IF;
    -- A key's SET NULL reads with the newest snapshot and fails a REPEATABLE READ deleter that
    -- would miss a job committed after its snapshot; plpgsql cannot, so refuse instead.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE serialization_failure USING
            MESSAGE = format('delete %s rows (or their project) under READ COMMITTED',
                             TG_TABLE_NAME);
    END IF;
    -- For schedule_id: jobs_schedule_idx (schedule_id, id DESC) WHERE schedule_id IS NOT NULL.
    EXECUTE format('UPDATE jobs SET %I = NULL WHERE %I = ANY ($1)', col, col)
        USING ARRAY(SELECT id FROM gone);
    RETURN NULL;
END $$;
CREATE TRIGGER retry_policies_delete AFTER DELETE ON retry_policies REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_null_parent_ref('retry_policy_id');
CREATE TRIGGER retry_policies_truncate AFTER TRUNCATE ON retry_policies
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_null_parent_ref('retry_policy_id');
CREATE TRIGGER retry_policies_keep_id BEFORE UPDATE OF id ON retry_policies FOR EACH ROW
    WHEN (NEW.id IS DISTINCT FROM OLD.id)
    EXECUTE FUNCTION keep_referenced_key('jobs_retry_policy_id_fkey');
CREATE TRIGGER scheduled_jobs_delete AFTER DELETE ON scheduled_jobs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_null_parent_ref('schedule_id');
CREATE TRIGGER scheduled_jobs_truncate AFTER TRUNCATE ON scheduled_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_null_parent_ref('schedule_id');
CREATE TRIGGER scheduled_jobs_keep_id BEFORE UPDATE OF id ON scheduled_jobs FOR EACH ROW
    WHEN (NEW.id IS DISTINCT FROM OLD.id)
    EXECUTE FUNCTION keep_referenced_key('jobs_schedule_id_fkey');
"""

DOWNGRADE_TAIL = r"""
DROP TRIGGER scheduled_jobs_keep_id ON scheduled_jobs;
DROP TRIGGER scheduled_jobs_truncate ON scheduled_jobs;
DROP TRIGGER scheduled_jobs_delete ON scheduled_jobs;
DROP TRIGGER retry_policies_keep_id ON retry_policies;
DROP TRIGGER retry_policies_truncate ON retry_policies;
DROP TRIGGER retry_policies_delete ON retry_policies;
DROP FUNCTION jobs_null_parent_ref();
DROP TRIGGER jobs_parent_refs_upd ON jobs;
CREATE TRIGGER jobs_parent_refs_upd AFTER UPDATE OF queue_id, project_id, batch_id ON jobs
    FOR EACH ROW
    WHEN ((NEW.queue_id, NEW.project_id) IS DISTINCT FROM (OLD.queue_id, OLD.project_id)
          OR (NEW.batch_id IS NOT NULL AND NEW.batch_id IS DISTINCT FROM OLD.batch_id))
    EXECUTE FUNCTION jobs_parent_refs_check();
DROP FUNCTION parents_lock_for_key(regclass, bigint[]);
ALTER TABLE jobs
    ADD CONSTRAINT jobs_retry_policy_id_fkey FOREIGN KEY (retry_policy_id)
        REFERENCES retry_policies (id) ON DELETE SET NULL,
    ADD CONSTRAINT jobs_schedule_id_fkey FOREIGN KEY (schedule_id)
        REFERENCES scheduled_jobs (id) ON DELETE SET NULL;
"""


def _parent_refs_check_0002() -> str:
    """0002's jobs_parent_refs_check, as CREATE OR REPLACE."""
    return earlier.replaced_function(_REFS_0002, "CREATE FUNCTION jobs_parent_refs_check(", "$$;")


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(_parent_refs_check_0002())
    op.execute(DOWNGRADE_TAIL)
