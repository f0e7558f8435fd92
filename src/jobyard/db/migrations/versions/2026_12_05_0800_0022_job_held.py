"""job_held: the held jobs of limited queues, counted where a held snapshot cannot slow it down.

A claim on a queue with `max_concurrency` counts the queue's held (claimed or running) jobs under
the queue's row lock. It counted them in `jobs_held_idx`, the partial index of held jobs on
`jobs`: every job that has run since a long transaction began leaves a dead entry there that
neither vacuum nor the index's own clean-up may remove, so under a held horizon the count walked
all of them (110,777 heap fetches to count 0 held jobs 130 s into a hold at 800 jobs/s), and the
queue's claims, serialized behind its lock, waited for it: pickup p99 21× its baseline against
1.2× for the same queue without a limit (docs/DATABASE.md, "The held set").

- `job_held (slot, job_id, queue_id)`: one row per held job of a queue that has a limit,
  LIST-partitioned on the two-second `job_ready_slot` like `job_ready`. `job_held_rotate` empties
  the partition that becomes current next the same way (its live rows moved, then TRUNCATE):
  both are now one function, `job_set_rotate`, given the set's name and what to keep. The move
  keeps only rows whose job is still held, so a row that a transition failed to delete cannot
  count against the limit for longer than a rotation.
- `jobs_held_sync` (statement triggers on jobs): a claim that makes jobs of a limited queue held
  inserts their rows; any transition out of `claimed`/`running` deletes them, whatever the queue.
  Jobs are never inserted held, so no INSERT trigger. While no queue has a limit an UPDATE pays
  one probe of the partial index `queues_limited_idx` and nothing else (a drain without it was
  6–7 % slower, docs/BENCHMARKS.md).
- The count reads `job_held` only once the queue's set is complete (`queues.held_counted`). A
  limit set on a queue that has held jobs starts incomplete, and `job_held_fill` completes it in
  two calls, each its own transaction: the first records its own transaction id in
  `queues.held_fill_after`; a later one, once every transaction older than that id has ended,
  copies the queue's held jobs that have no row and sets `held_counted`. The wait closes a race:
  a claim whose trigger looked before the limit was committed made no row, and its transaction
  id is older than any assigned after that commit. Until then the count is the old one. A queue
  created with a limit holds no job, so it starts complete; a limit removed starts over.
- Queues that have a limit now are filled here, after the trigger is in place: CREATE TRIGGER
  waits for every transaction writing `jobs` and holds them off until this one commits.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 08:00
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_ROTATE_0020 = "jobyard.db.migrations.versions.2026_12_04_2230_0020_rotate_asks_holders_first"

UPGRADE = r"""
CREATE TABLE job_held (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue_id bigint NOT NULL
) PARTITION BY LIST (slot);
CREATE TABLE job_held_0 PARTITION OF job_held FOR VALUES IN (0);
CREATE TABLE job_held_1 PARTITION OF job_held FOR VALUES IN (1);
CREATE TABLE job_held_2 PARTITION OF job_held FOR VALUES IN (2);
-- The count (by queue) and the transitions' delete (by job); named per partition like job_ready's.
CREATE INDEX job_held_0_queue_idx ON job_held_0 (queue_id);
CREATE INDEX job_held_1_queue_idx ON job_held_1 (queue_id);
CREATE INDEX job_held_2_queue_idx ON job_held_2 (queue_id);
CREATE INDEX job_held_queue_idx ON job_held (queue_id);
CREATE INDEX job_held_0_job_idx ON job_held_0 (job_id);
CREATE INDEX job_held_1_job_idx ON job_held_1 (job_id);
CREATE INDEX job_held_2_job_idx ON job_held_2 (job_id);
CREATE INDEX job_held_job_idx ON job_held (job_id);

ALTER TABLE queues
    ADD COLUMN held_counted boolean NOT NULL DEFAULT false,
    ADD COLUMN held_fill_after xid8;
-- Whether any queue has a limit: the held-set trigger asks on every statement that updates jobs.
CREATE INDEX queues_limited_idx ON queues (id) WHERE max_concurrency IS NOT NULL;
COMMENT ON COLUMN queues.held_counted IS
    'job_held holds a row for every held job of this queue: the claim counts there (migration 0022)';
COMMENT ON COLUMN queues.held_fill_after IS
    'job_held_fill completes the set once every transaction older than this has ended';

-- A queue without a limit has no held set, so one set later starts incomplete (its claims made
-- no rows meanwhile); a new queue holds no job, so its set is complete from the start.
CREATE FUNCTION queues_held_reset() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.max_concurrency IS NULL THEN
        NEW.held_counted := false;
        NEW.held_fill_after := NULL;
    ELSIF TG_OP = 'INSERT' THEN
        NEW.held_counted := true;
        NEW.held_fill_after := NULL;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER queues_held_reset BEFORE INSERT OR UPDATE OF max_concurrency ON queues
    FOR EACH ROW EXECUTE FUNCTION queues_held_reset();

CREATE FUNCTION jobs_held_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE job_held;
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT FROM gone WHERE status IN ('claimed', 'running')) THEN
            DELETE FROM job_held h USING gone g WHERE h.job_id = g.id;
        END IF;
        RETURN NULL;
    END IF;
    -- Most deployments set no limit: then one probe of an empty partial index is all a claim or
    -- a completion pays here. Rows left behind by a limit removed since are the rotation's to
    -- drop (it keeps only the rows of held jobs).
    IF NOT EXISTS (SELECT FROM queues WHERE max_concurrency IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    -- Left a held state (completion, failure, retry, lease expiry), on any queue: the limit may
    -- have been removed since the row was made.
    IF EXISTS (SELECT FROM old_jobs WHERE status IN ('claimed', 'running'))
       AND EXISTS (SELECT FROM new_jobs WHERE status NOT IN ('claimed', 'running')) THEN
        DELETE FROM job_held h USING new_jobs n
        WHERE h.job_id = n.id AND n.status NOT IN ('claimed', 'running');
    END IF;
    -- Entered one (a claim). Heartbeats and starts (held before and after) do neither.
    IF EXISTS (SELECT FROM new_jobs WHERE status IN ('claimed', 'running'))
       AND EXISTS (SELECT FROM old_jobs WHERE status NOT IN ('claimed', 'running')) THEN
        -- clock_timestamp: a statement that ran long still writes to the period it ends in.
        INSERT INTO job_held (slot, job_id, queue_id)
        SELECT job_ready_slot(clock_timestamp()), n.id, n.queue_id
        FROM new_jobs n JOIN queues q ON q.id = n.queue_id
        WHERE n.status IN ('claimed', 'running') AND q.max_concurrency IS NOT NULL
          AND NOT EXISTS (SELECT FROM job_held h WHERE h.job_id = n.id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_held_upd AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_held_sync();
CREATE TRIGGER jobs_held_del AFTER DELETE ON jobs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_held_sync();
CREATE TRIGGER jobs_held_truncate AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_held_sync();

-- One rotation for both partitioned sets, job_ready and job_held (`family`): empty the partition
-- that becomes current next. Returns 'clean' (empty on disk), 'locked' (held by a transaction
-- older than held_ms, or still held after wait_ms), 'crowded' (more than 2,000 live rows to copy
-- under the lock), 'busy' (another session rotates this family) or 'rotated': the rows that
-- `keep` selects from the partition (`t`) moved to the current one, then TRUNCATE. `keep` is a
-- constant of the two wrappers below, never input. The order and the reasons are those of
-- migrations 0012, 0015, 0017 and 0020.
CREATE FUNCTION job_set_rotate(family text, keep text, wait_ms integer, held_ms integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    current_slot smallint := job_ready_slot(clock_timestamp());
    target text := format('%s_%s', family, (current_slot + 1) % 3);
    live integer;
BEGIN
    IF pg_relation_size(target::regclass) = 0 THEN
        RETURN 'clean';
    END IF;
    -- Asked before the count below (0020): a long transaction holding the partition also keeps
    -- every dead row of it, and a count that stops at 2,001 live rows would walk them all. Such
    -- a transaction (a REPEATABLE READ reader) will not let go within wait_ms, and claims would
    -- queue behind our pending exclusive request all that time: give up without asking (0017).
    IF EXISTS (
        SELECT 1
        FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'relation'
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.relation = target::regclass::oid
          AND l.granted
          AND l.pid <> pg_backend_pid()
          AND a.xact_start < clock_timestamp() - make_interval(secs => held_ms / 1000.0)
    ) THEN
        RETURN 'locked';
    END IF;
    -- A backlog: copying it under the exclusive lock would stall every claim (0015).
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I LIMIT 2001) s', target) INTO live;
    IF live > 2000 THEN
        RETURN 'crowded';
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext(format('jobyard.%s_rotate', family))) THEN
        RETURN 'busy';
    END IF;
    PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
    BEGIN
        EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', target);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'locked';
    END;
    -- Under the exclusive lock no claim can hold or take one of these rows, so each live row is
    -- in exactly one partition when the lock is released. `keep` lists the columns after `slot`
    -- in the table's order.
    EXECUTE format('INSERT INTO %I SELECT %s, %s', format('%s_%s', family, current_slot),
                   current_slot, format(keep, target));
    EXECUTE format('TRUNCATE %I', target);
    RETURN 'rotated';
END $$;

CREATE OR REPLACE FUNCTION job_ready_rotate(wait_ms integer DEFAULT 20, held_ms integer DEFAULT 1000)
RETURNS text LANGUAGE sql AS $$
    SELECT job_set_rotate(
        'job_ready', 't.job_id, t.queue_id, t.priority, t.run_at, t.suspect FROM %I t',
        wait_ms, held_ms)
$$;

-- Only the rows of jobs still held move: one whose transition did not delete it dies here
-- instead of counting against its queue's limit for good. Each row's job is read by key, in a
-- scalar subquery the planner cannot turn into a join: a freshly truncated partition has no
-- statistics, and as a join the move was planned as a hash join over a scan of all of `jobs`
-- (127 ms under the exclusive lock late in a ten-minute held horizon, every claim of the
-- limited queue waiting behind it).
CREATE FUNCTION job_held_rotate(wait_ms integer DEFAULT 20, held_ms integer DEFAULT 1000)
RETURNS text LANGUAGE sql AS $$
    SELECT job_set_rotate(
        'job_held',
        't.job_id, t.queue_id FROM %I t'
        ' WHERE (SELECT j.status::text FROM jobs j WHERE j.id = t.job_id)'
        ' IN (''claimed'', ''running'')',
        wait_ms, held_ms)
$$;

-- Complete the held set of each queue whose limit came after its held jobs (see the module
-- docstring); the number of queues completed. Call it outside any transaction: each call's
-- transaction id must be newer than the limits it reads.
CREATE FUNCTION job_held_fill() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    -- Taken before this transaction has an id: every transaction id below it has ended.
    ended_below xid8 := pg_snapshot_xmin(pg_current_snapshot());
    q record;
    filled integer := 0;
BEGIN
    IF NOT EXISTS (SELECT FROM queues WHERE max_concurrency IS NOT NULL AND NOT held_counted) THEN
        RETURN 0;
    END IF;
    -- Two fills at once would each copy the same held jobs: one count twice as high.
    IF NOT pg_try_advisory_xact_lock(hashtext('jobyard.job_held_fill')) THEN
        RETURN 0;
    END IF;
    FOR q IN SELECT id, held_fill_after FROM queues
             WHERE max_concurrency IS NOT NULL AND NOT held_counted ORDER BY id LOOP
        IF q.held_fill_after IS NULL THEN
            UPDATE queues SET held_fill_after = pg_current_xact_id()
            WHERE id = q.id AND max_concurrency IS NOT NULL AND NOT held_counted
              AND held_fill_after IS NULL;
        ELSIF q.held_fill_after <= ended_below THEN
            INSERT INTO job_held (slot, job_id, queue_id)
            SELECT job_ready_slot(clock_timestamp()), j.id, j.queue_id
            FROM jobs j
            WHERE j.queue_id = q.id AND j.status IN ('claimed', 'running')
              AND NOT EXISTS (SELECT FROM job_held h WHERE h.job_id = j.id);
            -- Unless the limit was removed (and perhaps set again) meanwhile.
            UPDATE queues SET held_counted = true
            WHERE id = q.id AND max_concurrency IS NOT NULL AND held_fill_after = q.held_fill_after;
            IF FOUND THEN
                filled := filled + 1;
            END IF;
        END IF;
    END LOOP;
    RETURN filled;
END $$;

INSERT INTO job_held (slot, job_id, queue_id)
SELECT job_ready_slot(clock_timestamp()), j.id, j.queue_id
FROM jobs j JOIN queues q ON q.id = j.queue_id
WHERE j.status IN ('claimed', 'running') AND q.max_concurrency IS NOT NULL;
UPDATE queues SET held_counted = true WHERE max_concurrency IS NOT NULL;
"""

DOWNGRADE = r"""
DROP FUNCTION job_held_fill();
DROP FUNCTION job_held_rotate(integer, integer);
DROP TRIGGER jobs_held_truncate ON jobs;
DROP TRIGGER jobs_held_del ON jobs;
DROP TRIGGER jobs_held_upd ON jobs;
DROP FUNCTION jobs_held_sync();
DROP TRIGGER queues_held_reset ON queues;
DROP FUNCTION queues_held_reset();
DROP INDEX queues_limited_idx;
ALTER TABLE queues DROP COLUMN held_fill_after, DROP COLUMN held_counted;
DROP TABLE job_held;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
    # job_ready_rotate as 0020 left it, then the helper it no longer calls.
    op.execute(importlib.import_module(_ROTATE_0020)._reordered())
    op.execute("DROP FUNCTION job_set_rotate(text, text, integer, integer);")
