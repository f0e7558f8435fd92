-- name: job_claim_batch
-- Claim up to n queued jobs from one unpaused queue; open an execution row for each.
WITH picked AS MATERIALIZED (
    -- The partial claim index supplies this order, so LIMIT stops after n rows;
    -- MATERIALIZED keeps the planner from re-running the limited subquery.
    SELECT j.id
    FROM jobs j
    WHERE j.queue_id = %(queue_id)s
      AND j.status = 'queued'
      AND NOT EXISTS (SELECT 1 FROM queues q WHERE q.id = %(queue_id)s AND q.is_paused)
    ORDER BY j.priority DESC NULLS FIRST, j.run_at, j.id
    FOR UPDATE OF j SKIP LOCKED
    LIMIT %(n)s
), claimed AS (
    -- Every claim charges an attempt and opens a new execution_seq (identity, never reused).
    UPDATE jobs j
    SET status = 'claimed',
        worker_id = %(worker_id)s,
        claimed_at = coalesce(%(now)s, now()),
        lock_expires_at = coalesce(%(now)s, now()) + make_interval(secs => %(lease_s)s),
        attempt = j.attempt + 1,
        execution_seq = j.execution_seq + 1,
        updated_at = coalesce(%(now)s, now())
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.id, j.project_id, j.queue_id, j.handler, j.payload, j.priority, j.attempt,
              j.max_attempts, j.execution_seq, j.timeout_ms, j.lock_expires_at, j.worker_id
), opened AS (
    INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, started_at)
    SELECT c.id, c.execution_seq, c.attempt, c.worker_id, coalesce(%(now)s, now())
    FROM claimed c
)
SELECT * FROM claimed
