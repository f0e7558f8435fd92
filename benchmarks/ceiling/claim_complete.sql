-- The ceiling: jobyard's claim and completion SQL alone, no worker around it (run by pgbench from
-- benchmarks/ceiling/ceiling.py; README.md there). One pgbench transaction is the worker's
-- two round trips for one batch of :n jobs, each statement its own (autocommit) transaction as
-- in the worker:
--   1. the claim, as `job_claim_batch` in src/jobyard/db/sql/jobs.sql (start = true, solo =
--      false, limited = false, now = NULL, lease_s = 30: what `jobyard worker` sends in a
--      drain), its rows folded into two arrays for \gset;
--   2. the completion, as `job_complete_many` in the same file (results all SQL NULL, as a
--      no-op handler's None is sent).
-- KEEP IN STEP with those two queries: when the claim or the completion changes, copy the new
-- text here, parameters renamed as below. The claim reads job_ready (migration 0012); pgbench
-- does not rotate its partitions as workers do, so autovacuum alone clears their dead rows here.
-- The positioned claim (`job_claim_batch_after`, migration 0014) is not measured here: workers
-- use it only while a reader blocks the rotation.
-- Variables (pgbench -D): queue_id, n, first_worker (client k runs as worker first_worker + k,
-- pgbench's :client_id, so each client is its own worker as each process is).
\set worker_id :first_worker + :client_id
WITH queue AS MATERIALIZED (
    SELECT q.id FROM queues q
    WHERE q.id = :queue_id AND NOT q.is_paused
      AND (q.max_concurrency IS NULL OR false)
), suspect AS MATERIALIZED (
    SELECT r.job_id AS id
    FROM job_ready r
    WHERE r.queue_id = :queue_id AND r.suspect
      AND EXISTS (SELECT 1 FROM queue)
      AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id AND j.status = 'queued'
                  FOR UPDATE OF j SKIP LOCKED)
    ORDER BY r.priority DESC NULLS FIRST, r.run_at, r.job_id
    LIMIT CASE WHEN false THEN 1 ELSE 0 END
), picked AS MATERIALIZED (
    SELECT r.job_id AS id
    FROM job_ready r
    WHERE r.queue_id = :queue_id
      AND NOT r.suspect
      AND EXISTS (SELECT 1 FROM queue)
      AND NOT EXISTS (SELECT 1 FROM suspect)
      AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id AND j.status = 'queued'
                  FOR UPDATE OF j SKIP LOCKED)
    ORDER BY - r.priority, r.run_at, r.job_id
    LIMIT :n
), claimed AS (
    UPDATE jobs j
    SET status = CASE WHEN true THEN 'running'::job_status ELSE 'claimed'::job_status END,
        worker_id = :worker_id,
        claimed_at = statement_timestamp(),
        started_at = CASE WHEN true THEN statement_timestamp() END,
        lock_expires_at = statement_timestamp()
                          + make_interval(secs => 30.0),
        attempt = j.attempt + 1,
        execution_seq = j.execution_seq + 1,
        updated_at = statement_timestamp()
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked UNION ALL SELECT id FROM suspect))
    RETURNING j.id, j.project_id, j.queue_id, j.handler, j.payload, j.priority, j.attempt,
              j.max_attempts, j.execution_seq, j.timeout_ms, j.lock_expires_at, j.worker_id,
              j.suspect, j.run_at
), answer AS (
    SELECT claimed.*, false AS suspect_waiting FROM claimed
    UNION ALL
    SELECT c.*, true AS suspect_waiting
    FROM (SELECT) AS one LEFT JOIN claimed c ON false
    WHERE NOT false
      AND EXISTS (SELECT 1 FROM job_ready s WHERE s.queue_id = :queue_id AND s.suspect)
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
    WHERE j.id = t.id AND j.execution_seq = t.seq AND j.worker_id IS NOT DISTINCT FROM :worker_id
      AND j.status::text = 'running'
    RETURNING j.id, j.execution_seq, j.attempt, j.worker_id, j.started_at
), recorded AS (
    INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome, started_at,
                                finished_at, duration_ms)
    SELECT f.id, f.execution_seq, f.attempt, f.worker_id, 'succeeded', f.started_at, now(),
           greatest(0, (extract(epoch FROM now() - f.started_at) * 1000)::int)
    FROM finished f
)
SELECT f.id FROM finished f;
