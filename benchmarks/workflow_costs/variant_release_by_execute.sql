-- A variant of jobs_final_effects for statements.py --variant (tried, not shipped; docs/BENCHMARKS.md "Workflows").
-- The release UPDATE as a one-shot plan (EXECUTE ... USING) instead of the function's cached plan.
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
        EXECUTE $q$
        WITH released AS (
            UPDATE jobs c SET status = 'queued', updated_at = now()
            WHERE c.id = ANY ($1) AND c.status = 'waiting'
              AND NOT EXISTS (
                  SELECT FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on_job_id
                  WHERE d.job_id = c.id
                    AND (p.status NOT IN ('done', 'dead_letter', 'cancelled')
                         OR (p.status <> 'done' AND NOT d.run_anyway)))
            RETURNING c.queue_id
        )
        SELECT count(pg_notify('jobyard_jobs', r.queue_id::text))
        FROM (SELECT DISTINCT queue_id FROM released) r
        $q$ INTO woke USING ids;
    END IF;

    -- 3. Batch counters, on the batch row. Rows are locked in id order first (a completion may
    -- hold jobs of several batches). The UPDATE adds to the newest committed counts, so exactly
    -- one transaction sees them reach the size with completed_at still NULL.
    IF NOT EXISTS (SELECT FROM new_jobs WHERE batch_id IS NOT NULL) THEN
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
            WHERE jb.id IN (SELECT batch_id FROM delta) ORDER BY jb.id FOR UPDATE
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
