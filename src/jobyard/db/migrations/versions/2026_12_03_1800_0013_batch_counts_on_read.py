"""Batch counters kept only where callbacks need them; other batches are counted on read.

Every job of a batch enqueue has a `job_batches` row, and 0008's `jobs_final_effects` locked and
updated that row FOR UPDATE in every statement that moved one of its jobs into or out of a final
state. In a 2-process drain of one batch that UPDATE was ~6 ms of each ~12 ms completion, and
the two workers queued on the one row lock (Lock:transactionid, docs/BENCHMARKS.md). The lock is
the serialization point of the exactly-once callback decision; a batch without callbacks has no
decision to make, so it paid for nothing.

- Step 3 of `jobs_final_effects` keeps the counters (and takes the row lock) only for batches
  whose `callbacks` is not empty; it first asks, without a lock, whether any batch of the
  statement has callbacks, so a callback-less completion never touches `job_batches`.
- `job_batches_callbacks_fixed`: callbacks cannot be added to (or removed from) a batch after
  creation. Adding them later would need the counters brought up to date under the row lock
  while completions that saw no callbacks run unlocked; no path does it (only `job_insert_batch`
  writes callbacks), so it is refused rather than half supported.
- `job_batch_progress` (view): the one place batches are read. For a batch with callbacks it
  is the row; for one without, `done`/`failed`/`cancelled` are the stored columns plus a count
  of its jobs by status, and `completed_at` is its last job's `finished_at` once every job is
  final. On such a batch the stored columns now hold only what left `jobs`:
- `jobs_batch_purged` (AFTER DELETE statement trigger): final jobs of a callback-less batch that
  are deleted (retention, the delete action, a queue's cascade) are added to the stored counters
  and their latest `finished_at` to `completed_at`, so a purge does not turn done jobs back into
  pending ones (the counters never counted deletions before either). Deletes are rare and
  batched; the hot path is unchanged.
- The count reads the batch's jobs through `jobs_batch_idx (batch_id)` as it is. Widening it to
  (batch_id, status) would make the count index-only, but then every status change writes an
  index entry with a new key: btree's bottom-up deletion, which keeps an index whose key did not
  change free of the old versions, no longer applies, on the hot path, to save a read that only
  progress pages make.
- Existing callback-less batches: their stored counters become the jobs already gone (stored
  minus the live count, never below 0); `completed_at` stays as the floor of the derived one.
  The downgrade folds the live counts back in and restores 0008's function.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 18:00
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# 0008's function, restored by the downgrade.
_WORKFLOWS = "jobyard.db.migrations.versions.2026_12_03_1200_0008_workflows"

UPGRADE = r"""
-- Callback-less batches: the stored counters keep only the jobs no longer in `jobs`.
UPDATE job_batches b
SET done = greatest(b.done - c.done, 0), failed = greatest(b.failed - c.failed, 0),
    cancelled = greatest(b.cancelled - c.cancelled, 0)
FROM (SELECT batch_id,
             count(*) FILTER (WHERE status = 'done') AS done,
             count(*) FILTER (WHERE status = 'dead_letter') AS failed,
             count(*) FILTER (WHERE status = 'cancelled') AS cancelled
      FROM jobs WHERE batch_id IS NOT NULL GROUP BY batch_id) c
WHERE c.batch_id = b.id AND b.callbacks = '{}'::jsonb;

CREATE FUNCTION job_batches_callbacks_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
        MESSAGE = 'a batch''s callbacks are fixed when it is created',
        DETAIL = format('job_batches %s: callbacks %s cannot become %s', OLD.id,
                        OLD.callbacks, NEW.callbacks),
        CONSTRAINT = 'job_batches_callbacks_fixed', TABLE = 'job_batches',
        SCHEMA = TG_TABLE_SCHEMA;
END $$;

CREATE TRIGGER job_batches_callbacks_fixed BEFORE UPDATE OF callbacks ON job_batches
    FOR EACH ROW WHEN (OLD.callbacks IS DISTINCT FROM NEW.callbacks)
    EXECUTE FUNCTION job_batches_callbacks_fixed();

CREATE FUNCTION jobs_batch_purged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM gone WHERE batch_id IS NOT NULL
                   AND status IN ('done', 'dead_letter', 'cancelled')) THEN
        RETURN NULL;
    END IF;
    -- Rows in id order, as the completion trigger locks them (two purges never deadlock).
    WITH purged AS (
        SELECT g.batch_id,
               count(*) FILTER (WHERE g.status = 'done') AS d_done,
               count(*) FILTER (WHERE g.status = 'dead_letter') AS d_failed,
               count(*) FILTER (WHERE g.status = 'cancelled') AS d_cancelled,
               max(g.finished_at) AS last_finished
        FROM gone g
        WHERE g.batch_id IS NOT NULL AND g.status IN ('done', 'dead_letter', 'cancelled')
        GROUP BY g.batch_id
    ), locked AS MATERIALIZED (
        SELECT jb.id FROM job_batches jb
        WHERE jb.id IN (SELECT batch_id FROM purged) AND jb.callbacks = '{}'::jsonb
        ORDER BY jb.id FOR UPDATE
    )
    UPDATE job_batches jb
    SET done = jb.done + p.d_done, failed = jb.failed + p.d_failed,
        cancelled = jb.cancelled + p.d_cancelled,
        completed_at = greatest(jb.completed_at, p.last_finished)
    FROM purged p
    WHERE jb.id = p.batch_id AND jb.id IN (SELECT id FROM locked);
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_batch_purged AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_batch_purged();

-- What every reader of a batch's progress selects from. The LATERAL count runs only for a
-- callback-less batch (a one-time filter on b.callbacks), through jobs_batch_idx; the last
-- finished_at is looked up only once the batch is complete.
CREATE VIEW job_batch_progress AS
SELECT b.id, b.project_id, b.queue_id, b.size,
       (b.done + c.done)::integer AS done,
       (b.failed + c.failed)::integer AS failed,
       (b.cancelled + c.cancelled)::integer AS cancelled,
       CASE WHEN b.callbacks <> '{}'::jsonb THEN b.completed_at
            WHEN b.done + c.done + b.failed + c.failed + b.cancelled + c.cancelled >= b.size
            THEN greatest(b.completed_at,
                          (SELECT max(j.finished_at) FROM jobs j
                           WHERE j.batch_id = b.id
                             AND j.status IN ('done', 'dead_letter', 'cancelled')))
       END AS completed_at,
       b.callbacks, b.callback_job_ids, b.created_at
FROM job_batches b
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE j.status = 'done') AS done,
           count(*) FILTER (WHERE j.status = 'dead_letter') AS failed,
           count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled
    FROM jobs j
    WHERE b.callbacks = '{}'::jsonb AND j.batch_id = b.id
      AND j.status IN ('done', 'dead_letter', 'cancelled')
) c;

CREATE OR REPLACE FUNCTION jobs_final_effects() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    b record;
    ok boolean;
    ids bigint[];
    woke bigint;
BEGIN
    -- Claims, heartbeats, promotions and retries touch no final state: leave after one pass
    -- over each transition table.
    IF NOT EXISTS (SELECT FROM new_jobs WHERE status IN ('done', 'dead_letter', 'cancelled'))
       AND NOT EXISTS (SELECT FROM old_jobs WHERE status IN ('done', 'dead_letter', 'cancelled'))
    THEN
        RETURN NULL;
    END IF;

    -- 1. The failure policy: the waiting dependents of a parent that ended dead_letter or
    -- cancelled are cancelled, transitively, in this transaction, with a reason naming the
    -- parent. An edge marked run_anyway stops the walk (step 2 queues that child).
    -- Each step first asks a one-table question, so a plain completion skips the joins.
    IF EXISTS (SELECT FROM new_jobs WHERE status IN ('dead_letter', 'cancelled')) THEN
    WITH RECURSIVE failed AS (
        SELECT nj.id, nj.status FROM new_jobs nj JOIN old_jobs oj ON oj.id = nj.id
        WHERE nj.status IN ('dead_letter', 'cancelled')
          AND oj.status NOT IN ('done', 'dead_letter', 'cancelled')
    ), doomed(id, via, root, root_status, depth) AS (
        SELECT d.job_id, f.id, f.id, f.status::text, 1
        FROM failed f
        JOIN job_dependencies d ON d.depends_on_job_id = f.id AND NOT d.run_anyway
        JOIN jobs c ON c.id = d.job_id AND c.status = 'waiting'
        UNION
        SELECT d.job_id, x.id, x.root, x.root_status, x.depth + 1
        FROM doomed x
        JOIN job_dependencies d ON d.depends_on_job_id = x.id AND NOT d.run_anyway
        JOIN jobs c ON c.id = d.job_id AND c.status = 'waiting'
        WHERE x.depth < 10000
    ), nearest AS (
        SELECT DISTINCT ON (id) id, via, root, root_status, depth
        FROM doomed ORDER BY id, depth, root
    )
    UPDATE jobs c
    SET status = 'cancelled', finished_at = now(), updated_at = now(),
        cancel_requested_at = coalesce(c.cancel_requested_at, now()),
        cancel_reason = CASE
            WHEN x.depth = 1 THEN format('dependency failed: parent job %s ended %s',
                                         x.root, x.root_status)
            ELSE format('dependency failed: parent job %s was cancelled because job %s ended %s',
                        x.via, x.root, x.root_status) END
    FROM nearest x
    WHERE c.id = x.id AND c.status = 'waiting';
    END IF;

    -- 2. Waiting children of parents that just became final: lock them (in id order, so two
    -- completers never deadlock), then look at their parents with a fresh snapshot. Of two
    -- parents finishing at once, the second to lock the child sees the first committed.
    -- (No join with old_jobs: a child looked at twice is harmless, its parents decide.)
    SELECT array_agg(DISTINCT d.job_id ORDER BY d.job_id) INTO ids
    FROM new_jobs nj
    JOIN job_dependencies d ON d.depends_on_job_id = nj.id
    WHERE nj.status IN ('done', 'dead_letter', 'cancelled');
    IF ids IS NOT NULL THEN
        PERFORM FROM jobs WHERE id = ANY (ids) AND status = 'waiting' ORDER BY id FOR UPDATE;
        WITH released AS (
            UPDATE jobs c SET status = 'queued', updated_at = now()
            WHERE c.id = ANY (ids) AND c.status = 'waiting'
              AND NOT EXISTS (
                  SELECT FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on_job_id
                  WHERE d.job_id = c.id
                    AND (p.status NOT IN ('done', 'dead_letter', 'cancelled')
                         OR (p.status <> 'done' AND NOT d.run_anyway)))
            RETURNING c.queue_id
        )
        SELECT count(pg_notify('jobyard_jobs', r.queue_id::text)) INTO woke
        FROM (SELECT DISTINCT queue_id FROM released) r;
    END IF;

    -- 3. Batch counters, only for batches with callbacks (migration 0013): they alone need the
    -- exactly-once "last one out" decision. A callback-less batch's counts are read from its
    -- jobs (job_batch_progress), so its completions never write or lock its row. The callbacks
    -- are fixed at creation (job_batches_callbacks_fixed), so reading them without a lock is
    -- safe. Rows are locked in id order first (a completion may hold jobs of several batches).
    -- The UPDATE adds to the newest committed counts, so exactly one transaction sees them
    -- reach the size with completed_at still NULL.
    IF NOT EXISTS (SELECT FROM new_jobs WHERE batch_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
        SELECT FROM job_batches jb
        WHERE jb.id IN (SELECT nj.batch_id FROM new_jobs nj WHERE nj.batch_id IS NOT NULL)
          AND jb.callbacks <> '{}'::jsonb)
    THEN
        RETURN NULL;
    END IF;
    FOR b IN
        WITH delta AS (
            SELECT nj.batch_id,
                   count(*) FILTER (WHERE nj.status = 'done')
                     - count(*) FILTER (WHERE oj.status = 'done') AS d_done,
                   count(*) FILTER (WHERE nj.status = 'dead_letter')
                     - count(*) FILTER (WHERE oj.status = 'dead_letter') AS d_failed,
                   count(*) FILTER (WHERE nj.status = 'cancelled')
                     - count(*) FILTER (WHERE oj.status = 'cancelled') AS d_cancelled
            FROM new_jobs nj JOIN old_jobs oj ON oj.id = nj.id
            WHERE nj.batch_id IS NOT NULL AND nj.status IS DISTINCT FROM oj.status
              AND (nj.status IN ('done', 'dead_letter', 'cancelled')
                   OR oj.status IN ('done', 'dead_letter', 'cancelled'))
            GROUP BY nj.batch_id
        ), locked AS MATERIALIZED (
            SELECT jb.id FROM job_batches jb
            WHERE jb.id IN (SELECT batch_id FROM delta) AND jb.callbacks <> '{}'::jsonb
            ORDER BY jb.id FOR UPDATE
        )
        UPDATE job_batches jb
        SET done = jb.done + d.d_done, failed = jb.failed + d.d_failed,
            cancelled = jb.cancelled + d.d_cancelled
        FROM delta d
        WHERE jb.id = d.batch_id AND jb.id IN (SELECT id FROM locked)
        RETURNING jb.*
    LOOP
        CONTINUE WHEN b.completed_at IS NOT NULL OR b.done + b.failed + b.cancelled < b.size;
        ok := b.failed = 0 AND b.cancelled = 0;
        WITH spec AS (
            SELECT s.key, s.value AS v FROM jsonb_each(b.callbacks) s
            WHERE s.key = 'on_complete' OR (s.key = 'on_success' AND ok)
               OR (s.key = 'on_failure' AND NOT ok)
        ), inserted AS (
            INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                              max_attempts, timeout_ms)
            SELECT q.project_id, q.id, s.v->>'handler',
                   CASE WHEN jsonb_typeof(coalesce(s.v->'payload', '{}')) = 'object'
                        THEN coalesce(s.v->'payload', '{}') || jsonb_build_object('batch',
                             jsonb_build_object('id', b.id, 'size', b.size, 'done', b.done,
                                                'failed', b.failed, 'cancelled', b.cancelled))
                        ELSE s.v->'payload' END,
                   'queued', coalesce((s.v->>'priority')::int, 0), now(),
                   coalesce((s.v->>'max_attempts')::int, p.max_attempts, 5),
                   coalesce((s.v->>'timeout_ms')::int, q.default_timeout_ms)
            FROM spec s
            JOIN queues q ON q.project_id = b.project_id AND q.name = s.v->>'queue'
            LEFT JOIN retry_policies p ON p.id = q.retry_policy_id
            ORDER BY s.key
            RETURNING id, queue_id
        ), woken AS (
            SELECT count(pg_notify('jobyard_jobs', w.queue_id::text)) AS woken_n
            FROM (SELECT DISTINCT queue_id FROM inserted) w
        )
        SELECT coalesce(array_agg(i.id ORDER BY i.id), '{}'), (SELECT woken_n FROM woken)
        INTO ids, woke FROM inserted i;
        UPDATE job_batches SET completed_at = now(), callback_job_ids = ids WHERE id = b.id;
    END LOOP;
    RETURN NULL;
END $$;
"""

DOWNGRADE = r"""
-- Callback-less batches get their counters (and completed_at) back on the row.
UPDATE job_batches b
SET done = p.done, failed = p.failed, cancelled = p.cancelled, completed_at = p.completed_at
FROM job_batch_progress p
WHERE p.id = b.id AND b.callbacks = '{}'::jsonb;
DROP VIEW job_batch_progress;
DROP TRIGGER jobs_batch_purged ON jobs;
DROP FUNCTION jobs_batch_purged();
DROP TRIGGER job_batches_callbacks_fixed ON job_batches;
DROP FUNCTION job_batches_callbacks_fixed();
"""


def _final_effects_0008() -> str:
    source: str = importlib.import_module(_WORKFLOWS).UPGRADE
    start = source.index("CREATE FUNCTION jobs_final_effects()")
    end = source.index("CREATE TRIGGER jobs_final_effects")
    return source[start:end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
    op.execute(_final_effects_0008())
