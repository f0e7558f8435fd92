"""job_ready: the claimable jobs kept apart from the job history, reclaimed by TRUNCATE.

The claim used to scan the partial index jobs_claim_idx (status = 'queued') on `jobs`. Every claim
leaves a dead entry there that neither vacuum nor kill_prior_tuple may remove while any snapshot
holds the xmin horizon back, so with one idle transaction open each claim walked an ever longer
dead prefix (pickup p99 4 ms → 36 ms in ten minutes, docs/DATABASE.md).

- `job_ready`: one row per job whose status is 'queued' (queue, priority, run_at, suspect: what
  the claim orders and filters on), LIST-partitioned on `slot` into three partitions. New rows go
  to the slot of the current two-second period (`job_ready_slot`).
- `jobs_ready_sync` (statement triggers with transition tables on jobs, as 0002/0003): rows that
  enter 'queued' get a ready row, rows that leave it lose theirs, changes of queue, priority,
  run_at or suspect while queued are copied. Every path that changes a status goes through it.
- `job_ready_rotate()`: the partition that becomes current next has its few live rows moved to
  the current one and is then TRUNCATEd, under ACCESS EXCLUSIVE taken with a short lock_timeout
  (a reader holding ACCESS SHARE makes it give up and retry, never queue the claims behind it).
  TRUNCATE drops the dead rows whatever snapshot is held. Workers and the scheduler call it.
- jobs_claim_idx and jobs_suspect_idx go: only the claim read them, and it reads job_ready now.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 15:00
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE job_ready (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue_id bigint NOT NULL,
    priority integer NOT NULL,
    run_at timestamptz NOT NULL,
    suspect boolean NOT NULL
) PARTITION BY LIST (slot);
CREATE TABLE job_ready_0 PARTITION OF job_ready FOR VALUES IN (0);
CREATE TABLE job_ready_1 PARTITION OF job_ready FOR VALUES IN (1);
CREATE TABLE job_ready_2 PARTITION OF job_ready FOR VALUES IN (2);
-- The claim's order (as jobs_claim_idx had it), and the rare suspects on their own. Each
-- partition's index is named (job_ready_N_claim_idx), so plans and the EXPLAIN harness say
-- which partition a claim read; the parent's index adopts them.
CREATE INDEX job_ready_0_claim_idx ON job_ready_0 (queue_id, priority DESC, run_at, job_id);
CREATE INDEX job_ready_1_claim_idx ON job_ready_1 (queue_id, priority DESC, run_at, job_id);
CREATE INDEX job_ready_2_claim_idx ON job_ready_2 (queue_id, priority DESC, run_at, job_id);
CREATE INDEX job_ready_claim_idx ON job_ready (queue_id, priority DESC, run_at, job_id);
CREATE INDEX job_ready_0_suspect_idx ON job_ready_0 (queue_id, priority DESC, run_at, job_id)
    WHERE suspect;
CREATE INDEX job_ready_1_suspect_idx ON job_ready_1 (queue_id, priority DESC, run_at, job_id)
    WHERE suspect;
CREATE INDEX job_ready_2_suspect_idx ON job_ready_2 (queue_id, priority DESC, run_at, job_id)
    WHERE suspect;
CREATE INDEX job_ready_suspect_idx ON job_ready (queue_id, priority DESC, run_at, job_id)
    WHERE suspect;
CREATE INDEX job_ready_0_job_idx ON job_ready_0 (job_id);
CREATE INDEX job_ready_1_job_idx ON job_ready_1 (job_id);
CREATE INDEX job_ready_2_job_idx ON job_ready_2 (job_id);
-- The trigger finds a job's ready row by id (its slot is not known).
CREATE INDEX job_ready_job_idx ON job_ready (job_id);

-- The slot of the period `at` falls in: periods of two seconds, three slots in turn.
CREATE FUNCTION job_ready_slot(at timestamptz) RETURNS smallint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (floor(extract(epoch FROM at) / 2)::bigint % 3)::smallint
$$;

INSERT INTO job_ready (slot, job_id, queue_id, priority, run_at, suspect)
SELECT job_ready_slot(clock_timestamp()), id, queue_id, priority, run_at, suspect
FROM jobs WHERE status = 'queued';

CREATE FUNCTION jobs_ready_sync() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    slot smallint;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE job_ready;
        RETURN NULL;
    END IF;
    -- clock_timestamp: a statement that ran long still writes to the period it ends in.
    slot := job_ready_slot(clock_timestamp());
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_ready (slot, job_id, queue_id, priority, run_at, suspect)
        SELECT slot, n.id, n.queue_id, n.priority, n.run_at, n.suspect
        FROM new_jobs n WHERE n.status = 'queued';
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM job_ready r USING gone g
        WHERE r.job_id = g.id AND g.status = 'queued';
    ELSE
        -- Most updates (complete, fail, heartbeat, progress) touch no queued row: leave early.
        IF NOT EXISTS (SELECT FROM old_jobs WHERE status = 'queued')
           AND NOT EXISTS (SELECT FROM new_jobs WHERE status = 'queued') THEN
            RETURN NULL;
        END IF;
        -- Compared with the ready rows themselves, not old_jobs: a job has a ready row exactly
        -- when it was queued, and a join of old_jobs to new_jobs as well would be a third
        -- relation for the planner to order (a statement of 200,000 rows once took minutes).
        -- Left 'queued' (claim, cancel, dependency cancel).
        DELETE FROM job_ready r USING new_jobs n
        WHERE r.job_id = n.id AND n.status <> 'queued';
        -- Still queued, but ordered or filtered differently now.
        UPDATE job_ready r
        SET queue_id = n.queue_id, priority = n.priority, run_at = n.run_at, suspect = n.suspect
        FROM new_jobs n
        WHERE r.job_id = n.id AND n.status = 'queued'
          AND (n.queue_id, n.priority, n.run_at, n.suspect)
              IS DISTINCT FROM (r.queue_id, r.priority, r.run_at, r.suspect);
        -- Entered 'queued' (retry, requeue, promotion, release of dependants, replay, run-now).
        INSERT INTO job_ready (slot, job_id, queue_id, priority, run_at, suspect)
        SELECT slot, n.id, n.queue_id, n.priority, n.run_at, n.suspect
        FROM new_jobs n
        WHERE n.status = 'queued'
          AND NOT EXISTS (SELECT FROM job_ready r WHERE r.job_id = n.id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_ready_ins AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_ready_sync();
CREATE TRIGGER jobs_ready_upd AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_ready_sync();
CREATE TRIGGER jobs_ready_del AFTER DELETE ON jobs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_ready_sync();
CREATE TRIGGER jobs_ready_truncate AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_ready_sync();

-- Empty the partition that becomes current next: move its live rows (jobs still queued, a few)
-- to the current one, then TRUNCATE it, which frees its dead rows and index entries whatever
-- snapshot is held. Returns 'clean' (nothing to do: the partition is empty on disk), 'busy'
-- (another session rotates), 'locked' (a reader or writer holds the partition: retry later;
-- waiting would queue every claim behind this lock) or 'rotated'.
CREATE FUNCTION job_ready_rotate(wait_ms integer DEFAULT 20) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    current_slot smallint := job_ready_slot(clock_timestamp());
    target text := format('job_ready_%s', (current_slot + 1) % 3);
BEGIN
    IF pg_relation_size(target::regclass) = 0 THEN
        RETURN 'clean';
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('jobyard.job_ready_rotate')) THEN
        RETURN 'busy';
    END IF;
    PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
    BEGIN
        EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', target);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'locked';
    END;
    -- Under the exclusive lock no claim can hold or take one of these rows, so each live row is
    -- in exactly one partition when the lock is released.
    EXECUTE format(
        'INSERT INTO %I (slot, job_id, queue_id, priority, run_at, suspect)'
        ' SELECT %s, job_id, queue_id, priority, run_at, suspect FROM %I',
        format('job_ready_%s', current_slot), current_slot, target);
    EXECUTE format('TRUNCATE %I', target);
    RETURN 'rotated';
END $$;

DROP INDEX jobs_claim_idx;
DROP INDEX jobs_suspect_idx;
"""

DOWNGRADE = r"""
CREATE INDEX jobs_claim_idx ON jobs (queue_id, priority DESC NULLS FIRST, run_at, id)
    WHERE status = 'queued';
CREATE INDEX jobs_suspect_idx ON jobs (queue_id, priority DESC, run_at, id)
    WHERE status = 'queued' AND suspect;
DROP FUNCTION job_ready_rotate(integer);
DROP TRIGGER jobs_ready_truncate ON jobs;
DROP TRIGGER jobs_ready_del ON jobs;
DROP TRIGGER jobs_ready_upd ON jobs;
DROP TRIGGER jobs_ready_ins ON jobs;
DROP FUNCTION jobs_ready_sync();
DROP TABLE job_ready;
DROP FUNCTION job_ready_slot(timestamptz);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
