-- name: bench_clock
-- The database's wall clock now (not the transaction start): where a measured interval begins.
SELECT clock_timestamp() AS now

-- name: bench_server_info
-- The server version and the settings that decide how fast a commit can be.
SELECT version() AS version,
       current_setting('server_version') AS server_version,
       current_setting('fsync') AS fsync,
       current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('full_page_writes') AS full_page_writes,
       current_setting('wal_sync_method') AS wal_sync_method,
       current_setting('shared_buffers') AS shared_buffers,
       current_setting('max_connections') AS max_connections,
       current_setting('jit') AS jit,
       -- What decides the WAL a held horizon's VACUUMs add (hint bits are WAL-logged with
       -- checksums) and how often a page's first change after a checkpoint is logged whole.
       current_setting('data_checksums') AS data_checksums,
       current_setting('wal_compression') AS wal_compression,
       current_setting('max_wal_size') AS max_wal_size,
       current_setting('checkpoint_timeout') AS checkpoint_timeout

-- name: bench_queue_progress
-- How many jobs of a queue have finished, and how many exist (the harness polls this).
SELECT count(*) FILTER (WHERE status = 'done') AS done, count(*) AS total
FROM jobs WHERE queue_id = %(queue_id)s

-- name: bench_drain_window
-- A drained queue's executions by the database clock: first claim, last completion, counts.
SELECT min(e.started_at) AS first_started, max(e.finished_at) AS last_finished,
       count(*) AS executions,
       count(*) FILTER (WHERE e.outcome = 'succeeded') AS succeeded,
       count(DISTINCT e.job_id) AS jobs,
       count(DISTINCT e.worker_id) AS workers
FROM job_executions e JOIN jobs j ON j.id = e.job_id
WHERE j.queue_id = %(queue_id)s

-- name: bench_pickup_latency
-- Per queue: claim time minus enqueue time of each job's first execution, in milliseconds.
SELECT count(*) AS jobs,
       percentile_cont(0.50) WITHIN GROUP (ORDER BY ms) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) AS p95,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99,
       max(ms) AS max
FROM (SELECT extract(epoch FROM e.started_at - j.created_at) * 1000 AS ms
      FROM jobs j JOIN job_executions e ON e.job_id = j.id AND e.execution_seq = 1
      WHERE j.queue_id = %(queue_id)s) AS latency

-- name: bench_listening
-- Worker listeners of this database that have subscribed to every channel (LISTEN queues is
-- their last statement), so they are ready for a NOTIFY.
SELECT count(*) AS listening FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'jobyard-listen'
  AND state = 'idle' AND position('LISTEN jobyard_queues' IN query) > 0

-- name: bench_workers_active
-- Workers registered and running in this database (their signal handlers are installed).
SELECT count(*) AS active FROM workers WHERE status = 'active'

-- name: bench_insert_children
-- One waiting child for every queued job of a queue (the dependency drain's second half).
WITH kids AS (
    INSERT INTO jobs (project_id, queue_id, handler, status, payload)
    SELECT project_id, queue_id, handler, 'waiting', jsonb_build_object('parent', id)
    FROM jobs WHERE queue_id = %(queue_id)s AND status = 'queued'
    RETURNING id, payload
)
INSERT INTO job_dependencies (job_id, depends_on_job_id)
SELECT id, (payload->>'parent')::bigint FROM kids

-- name: bench_chain_latency
-- Per job with a parent: its first run's start minus its parent's finish (database clock), ms.
SELECT count(*) AS steps,
       percentile_cont(0.50) WITHIN GROUP (ORDER BY ms) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99,
       max(ms) AS max
FROM (SELECT extract(epoch FROM c.started_at - p.finished_at) * 1000 AS ms
      FROM job_dependencies d
      JOIN job_executions c ON c.job_id = d.job_id AND c.execution_seq = 1
      JOIN job_executions p ON p.job_id = d.depends_on_job_id AND p.outcome = 'succeeded'
      JOIN jobs j ON j.id = d.job_id
      WHERE j.queue_id = %(queue_id)s) AS latency

-- name: bench_fan_in_latency
-- A batch's last member's finish to its callback's start (database clock), ms.
SELECT b.size, b.done, cardinality(b.callback_job_ids) AS callbacks,
       extract(epoch FROM (SELECT min(e.started_at) FROM job_executions e
                           WHERE e.job_id = ANY (b.callback_job_ids))
                          - (SELECT max(j.finished_at) FROM jobs j WHERE j.batch_id = b.id)) * 1000
           AS ms
FROM job_batch_progress b WHERE b.id = %(batch_id)s

-- name: bench_job_done
-- Whether the given jobs are all done.
SELECT count(*) FILTER (WHERE status = 'done') = cardinality(%(ids)s::bigint[]) AS done
FROM jobs WHERE id = ANY(%(ids)s::bigint[])

-- name: bench_without_final_effects
-- The baseline without migration 0008's trigger (measures what it costs a plain drain).
ALTER TABLE jobs DISABLE TRIGGER jobs_final_effects
