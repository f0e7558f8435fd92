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
       current_setting('jit') AS jit

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
-- Worker listeners of this database that have subscribed to both channels (LISTEN cancel is
-- their last statement), so they are ready for a NOTIFY.
SELECT count(*) AS listening FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'jobyard-listen'
  AND state = 'idle' AND position('LISTEN jobyard_cancel' IN query) > 0

-- name: bench_workers_active
-- Workers registered and running in this database (their signal handlers are installed).
SELECT count(*) AS active FROM workers WHERE status = 'active'
