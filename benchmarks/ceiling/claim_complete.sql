-- The ceiling: jobyard's claim and completion SQL alone, no worker around it (run by pgbench from
-- benchmarks/ceiling/ceiling.py; README.md there). One pgbench transaction is the worker's
-- two round trips for one batch of :n jobs, each statement its own (autocommit) transaction as
-- in the worker:
--   1. the claim, as `job_claim_batch` in src/jobyard/db/sql/jobs.sql (start = true, solo =
--      false, limited = false, now = NULL, lease_s = 30: what `jobyard worker` sends in a
--      drain), its rows folded into two arrays for \gset;
--   2. the completion, as `job_complete_many` in the same file (results all SQL NULL, as a
--      no-op handler's None is sent).
-- KEEP IN STEP with those two queries: when the claim or the completion changes (e.g. the claim
-- moving to a job_ready table), copy the new text here, parameters renamed as below.
-- Variables (pgbench -D): queue_id, n, first_worker (client k runs as worker first_worker + k,
-- pgbench's :client_id, so each client is its own worker as each process is).
\set worker_id :first_worker + :client_id
WITH queue AS MATERIALIZED (
    SELECT q.id FROM queues q
    WHERE q.id = :queue_id AND NOT q.is_paused
      AND (q.max_concurrency IS NULL OR false)
), suspect AS MATERIALIZED (
    SELECT j.id
    FROM jobs j
    WHERE j.queue_id = :queue_id AND j.status = 'queued' AND j.suspect
      AND EXISTS (SELECT 1 FROM queue)
    ORDER BY j.priority DESC NULLS FIRST, j.run_at, j.id
    FOR UPDATE OF j SKIP LOCKED
    LIMIT CASE WHEN false THEN 1 ELSE 0 END
), picked AS MATERIALIZED (
    SELECT j.id
    FROM jobs j
    WHERE j.queue_id = :queue_id
      AND j.status = 'queued'
      AND NOT j.suspect
      AND EXISTS (SELECT 1 FROM queue)
      AND NOT EXISTS (SELECT 1 FROM suspect)
    ORDER BY j.priority DESC NULLS FIRST, j.run_at, j.id
    FOR UPDATE OF j SKIP LOCKED
    LIMIT :n
), claimed AS (
    UPDATE jobs j
    SET status = 'running'::job_status,
        worker_id = :worker_id,
        claimed_at = statement_timestamp(),
        started_at = statement_timestamp(),
        lock_expires_at = statement_timestamp() + make_interval(secs => 30.0),
        attempt = j.attempt + 1,
        execution_seq = j.execution_seq + 1,
        updated_at = statement_timestamp()
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked UNION ALL SELECT id FROM suspect))
    RETURNING j.id, j.project_id, j.queue_id, j.handler, j.payload, j.priority, j.attempt,
              j.max_attempts, j.execution_seq, j.timeout_ms, j.lock_expires_at, j.worker_id,
              j.suspect
), answer AS (
    SELECT claimed.*, false AS suspect_waiting FROM claimed
    UNION ALL
    SELECT c.*, true AS suspect_waiting
    FROM (SELECT) AS one LEFT JOIN claimed c ON false
    WHERE NOT false
      AND EXISTS (SELECT 1 FROM jobs s
                  WHERE s.queue_id = :queue_id AND s.status = 'queued' AND s.suspect)
)
SELECT coalesce(array_agg(id) FILTER (WHERE NOT suspect_waiting), '{}') AS ids,
       coalesce(array_agg(execution_seq) FILTER (WHERE NOT suspect_waiting), '{}') AS seqs
FROM answer \gset
WITH finished AS (
    UPDATE jobs j
    SET status = 'done', result = t.result, lock_expires_at = NULL, suspect = false,
        finished_at = now(), updated_at = now()
    FROM unnest(:ids::bigint[], :seqs::int[],
                array_fill(NULL::jsonb, ARRAY[cardinality(:ids::bigint[])])) AS t(id, seq, result)
    WHERE j.id = t.id AND j.execution_seq = t.seq AND j.worker_id = :worker_id
      AND j.status = 'running'
    RETURNING j.id, j.execution_seq, j.attempt, j.worker_id, j.started_at
), recorded AS (
    INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome, started_at,
                                finished_at, duration_ms)
    SELECT f.id, f.execution_seq, f.attempt, f.worker_id, 'succeeded', f.started_at, now(),
           greatest(0, (extract(epoch FROM now() - f.started_at) * 1000)::int)
    FROM finished f
)
SELECT f.id FROM finished f;
