"""The references a run writes are checked once per statement: jobs.worker_id,
job_executions.job_id and job_executions.worker_id.

A claim of 100 jobs checked jobs_worker_id_fkey 100 times (the same worker), and the completion
of those 100 checked both keys of job_executions 100 times each: in EXPLAIN ANALYZE on
PostgreSQL 18, ~0.7 ms of a ~2.9 ms claim and ~1.6 ms of the completion, per 100 jobs. Statement
triggers with transition tables lock each DISTINCT parent FOR KEY SHARE once (0.1–0.2 ms).
Errors keep the keys' names; the parents' sides (cascade, SET NULL, TRUNCATE, a changed id) are
kept by triggers too. docs/DATABASE.md explains the rules.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 08:00
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE jobs DROP CONSTRAINT jobs_worker_id_fkey;
ALTER TABLE job_executions DROP CONSTRAINT job_executions_job_id_fkey,
    DROP CONSTRAINT job_executions_worker_id_fkey;

-- Lock the given (distinct, non-NULL) parents FOR KEY SHARE, the lock a key check takes, and
-- return the first that does not exist (NULL when all do). One function per table rather than
-- one taking the table's name: dynamic SQL (EXECUTE) would be planned again on every call.
CREATE FUNCTION workers_lock_for_key(ids bigint[]) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    locked bigint;
    missing bigint;
BEGIN
    SELECT count(*) INTO locked FROM (SELECT FROM workers WHERE id = ANY (ids) FOR KEY SHARE) l;
    IF locked < cardinality(ids) THEN
        SELECT w INTO missing FROM unnest(ids) w
        WHERE NOT EXISTS (SELECT FROM workers x WHERE x.id = w) LIMIT 1;
    END IF;
    RETURN missing;
END $$;
CREATE FUNCTION jobs_lock_for_key(ids bigint[]) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    locked bigint;
    missing bigint;
BEGIN
    SELECT count(*) INTO locked FROM (SELECT FROM jobs WHERE id = ANY (ids) FOR KEY SHARE) l;
    IF locked < cardinality(ids) THEN
        SELECT j INTO missing FROM unnest(ids) j
        WHERE NOT EXISTS (SELECT FROM jobs x WHERE x.id = j) LIMIT 1;
    END IF;
    RETURN missing;
END $$;

-- jobs.worker_id → workers (id) ON DELETE SET NULL. A claim sets it on every row it takes, all
-- to one worker: the statement trigger reads the new rows once (min/max) and locks that worker
-- once. Every UPDATE of jobs fires it (a transition table cannot name columns); a statement
-- whose rows name no worker stops after the min/max. Jobs are inserted without a worker, so
-- the INSERT side is a row trigger whose WHEN skips them without calling plpgsql.
CREATE FUNCTION jobs_worker_ref_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lo bigint;
    hi bigint;
    wanted bigint[];
    bad bigint;
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        wanted := ARRAY[NEW.worker_id];
    ELSE
        SELECT min(worker_id), max(worker_id) INTO lo, hi FROM new_jobs;
        IF lo IS NULL THEN
            RETURN NULL;
        ELSIF lo = hi THEN
            wanted := ARRAY[lo];
        ELSE
            SELECT array_agg(DISTINCT worker_id) INTO wanted FROM new_jobs
            WHERE worker_id IS NOT NULL;
        END IF;
    END IF;
    bad := workers_lock_for_key(wanted);
    IF bad IS NOT NULL THEN
        PERFORM missing_parent('jobs', 'jobs_worker_id_fkey',
            format('Key (worker_id)=(%s) is not present in table "workers".', bad));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_worker_ref_ins AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.worker_id IS NOT NULL) EXECUTE FUNCTION jobs_worker_ref_check();
CREATE TRIGGER jobs_worker_ref_upd AFTER UPDATE ON jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_worker_ref_check();

-- job_executions.job_id → jobs (id) ON DELETE CASCADE and job_executions.worker_id → workers
-- (id) ON DELETE SET NULL. A completion inserts one row per finished run, all by one worker.
CREATE FUNCTION job_executions_refs_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lo bigint;
    hi bigint;
    jobs_wanted bigint[];
    workers_wanted bigint[];
    bad_job bigint;
    bad_worker bigint;
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        -- An UPDATE that changes job_id or names another worker (the WHEN of the trigger).
        IF NEW.job_id <> OLD.job_id THEN
            jobs_wanted := ARRAY[NEW.job_id];
        END IF;
        IF NEW.worker_id IS NOT NULL AND NEW.worker_id IS DISTINCT FROM OLD.worker_id THEN
            workers_wanted := ARRAY[NEW.worker_id];
        END IF;
    ELSE
        SELECT array_agg(DISTINCT job_id), min(worker_id), max(worker_id)
        INTO jobs_wanted, lo, hi FROM new_runs;
        IF lo = hi THEN
            workers_wanted := ARRAY[lo];
        ELSIF lo IS NOT NULL THEN
            SELECT array_agg(DISTINCT worker_id) INTO workers_wanted FROM new_runs
            WHERE worker_id IS NOT NULL;
        END IF;
    END IF;
    IF jobs_wanted IS NOT NULL THEN
        bad_job := jobs_lock_for_key(jobs_wanted);
    END IF;
    IF bad_job IS NOT NULL THEN
        PERFORM missing_parent('job_executions', 'job_executions_job_id_fkey',
            format('Key (job_id)=(%s) is not present in table "jobs".', bad_job));
    END IF;
    IF workers_wanted IS NOT NULL THEN
        bad_worker := workers_lock_for_key(workers_wanted);
    END IF;
    IF bad_worker IS NOT NULL THEN
        PERFORM missing_parent('job_executions', 'job_executions_worker_id_fkey',
            format('Key (worker_id)=(%s) is not present in table "workers".', bad_worker));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER job_executions_refs_ins AFTER INSERT ON job_executions
    REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION job_executions_refs_check();
CREATE TRIGGER job_executions_refs_upd AFTER UPDATE OF job_id, worker_id ON job_executions
    FOR EACH ROW
    WHEN (NEW.job_id <> OLD.job_id
          OR (NEW.worker_id IS NOT NULL AND NEW.worker_id IS DISTINCT FROM OLD.worker_id))
    EXECUTE FUNCTION job_executions_refs_check();

-- The parents' side. A key's cascade or SET NULL reads with the newest snapshot; plpgsql
-- cannot, and under REPEATABLE READ would miss a child committed after the snapshot, so a
-- delete outside READ COMMITTED is refused instead (as for queues and batches).
CREATE FUNCTION jobs_delete_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM job_executions;
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT FROM gone) THEN
        RETURN NULL;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE serialization_failure USING
            MESSAGE = 'delete jobs (or their queue or project) under READ COMMITTED';
    END IF;
    DELETE FROM job_executions WHERE job_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_delete_runs AFTER DELETE ON jobs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_delete_runs();
CREATE TRIGGER jobs_truncate_runs AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_delete_runs();

CREATE FUNCTION workers_null_refs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE jobs SET worker_id = NULL WHERE worker_id IS NOT NULL;
        UPDATE job_executions SET worker_id = NULL WHERE worker_id IS NOT NULL;
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT FROM gone) THEN
        RETURN NULL;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE serialization_failure USING
            MESSAGE = 'delete workers (or their project) under READ COMMITTED';
    END IF;
    UPDATE jobs SET worker_id = NULL WHERE worker_id = ANY (ARRAY(SELECT id FROM gone));
    UPDATE job_executions SET worker_id = NULL WHERE worker_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END $$;
CREATE TRIGGER workers_delete_refs AFTER DELETE ON workers REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION workers_null_refs();
CREATE TRIGGER workers_truncate_refs AFTER TRUNCATE ON workers
    FOR EACH STATEMENT EXECUTE FUNCTION workers_null_refs();

CREATE TRIGGER jobs_keep_id BEFORE UPDATE OF id ON jobs FOR EACH ROW
    WHEN (NEW.id IS DISTINCT FROM OLD.id)
    EXECUTE FUNCTION keep_referenced_key('job_executions_job_id_fkey');
CREATE TRIGGER workers_keep_id BEFORE UPDATE OF id ON workers FOR EACH ROW
    WHEN (NEW.id IS DISTINCT FROM OLD.id)
    EXECUTE FUNCTION keep_referenced_key('jobs_worker_id_fkey');
"""

DOWNGRADE = r"""
DROP TRIGGER workers_keep_id ON workers;
DROP TRIGGER jobs_keep_id ON jobs;
DROP TRIGGER workers_truncate_refs ON workers;
DROP TRIGGER workers_delete_refs ON workers;
DROP TRIGGER jobs_truncate_runs ON jobs;
DROP TRIGGER jobs_delete_runs ON jobs;
DROP TRIGGER job_executions_refs_upd ON job_executions;
DROP TRIGGER job_executions_refs_ins ON job_executions;
DROP TRIGGER jobs_worker_ref_upd ON jobs;
DROP TRIGGER jobs_worker_ref_ins ON jobs;
DROP FUNCTION workers_null_refs(), jobs_delete_runs(),
    job_executions_refs_check(), jobs_worker_ref_check(), jobs_lock_for_key(bigint[]),
    workers_lock_for_key(bigint[]);
ALTER TABLE jobs ADD CONSTRAINT jobs_worker_id_fkey FOREIGN KEY (worker_id)
    REFERENCES workers (id) ON DELETE SET NULL;
ALTER TABLE job_executions
    ADD CONSTRAINT job_executions_job_id_fkey FOREIGN KEY (job_id)
        REFERENCES jobs (id) ON DELETE CASCADE,
    ADD CONSTRAINT job_executions_worker_id_fkey FOREIGN KEY (worker_id)
        REFERENCES workers (id) ON DELETE SET NULL;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
