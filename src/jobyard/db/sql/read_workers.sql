-- Worker detail and topology reads for the dashboard (core.worker_views).

-- name: read_worker_detail
-- One worker of a project: identity, handlers when workers report them (read through to_jsonb
-- so this query works whether or not the `handlers` column exists), uptime frozen at stop.
-- Its in-flight count is the length of read_worker_held_jobs (one read of the held jobs).
SELECT w.id, w.name, w.hostname, w.pid, w.queues, w.concurrency AS capacity, w.status,
       w.started_at, w.last_heartbeat_at, w.stopped_at,
       to_jsonb(w) -> 'handlers' AS handlers, w.orphan_threads, w.loop_stalls, w.loop_stall,
       w.paused_at, w.paused_by,
       extract(epoch FROM coalesce(w.stopped_at, coalesce(%(now)s, now())) - w.started_at)::float8
           AS uptime_s
FROM workers w
WHERE w.project_id = %(project_id)s AND w.id = %(worker_id)s

-- name: read_worker_held_jobs
-- Jobs a worker holds now (claimed or running), bounded by its capacity: found in the held
-- set, each read by key (status::text: by key, see job_complete_many).
-- explain: {"worker_id": 1, "held_shown": 500}
SELECT j.id, q.name AS queue, j.handler, j.status, j.attempt, j.max_attempts, j.claimed_at,
       j.started_at, j.lock_expires_at, j.execution_seq
FROM jobs j
JOIN queues q ON q.id = j.queue_id
WHERE j.id = ANY (ARRAY(SELECT s.job_id FROM job_held s WHERE s.worker_id = %(worker_id)s))
  AND j.project_id = %(project_id)s AND j.worker_id IS NOT DISTINCT FROM %(worker_id)s
  AND j.status::text IN ('claimed', 'running')
ORDER BY j.claimed_at, j.id
LIMIT %(held_shown)s

-- name: read_worker_recent_runs
-- A worker's most recent finished runs, newest first (job_executions_worker_idx: worker, id).
-- explain: {"worker_id": 1, "limit": 20}
SELECT e.id, e.job_id, e.execution_seq, e.attempt, e.outcome, e.started_at, e.finished_at,
       e.duration_ms, left(e.error, 200) AS error, j.handler, q.name AS queue
FROM job_executions e
JOIN jobs j ON j.id = e.job_id
JOIN queues q ON q.id = j.queue_id
WHERE e.worker_id = %(worker_id)s AND j.project_id = %(project_id)s
ORDER BY e.id DESC
LIMIT %(limit)s

-- name: read_topology_workers
-- Workers to draw: every live one and the most recently stopped or dead, with in-flight counts
-- and uptime (frozen at stop).
-- explain: {"limit": 50}
SELECT w.id, w.name, w.hostname, w.pid, w.queues, w.concurrency AS capacity, w.status,
       w.started_at, w.last_heartbeat_at, w.stopped_at,
       extract(epoch FROM coalesce(w.stopped_at, coalesce(%(now)s, now())) - w.started_at)::float8
           AS uptime_s,
       coalesce(h.n, 0) AS in_flight, w.orphan_threads, w.loop_stall, w.paused_at,
       w.paused_by
FROM workers w
LEFT JOIN LATERAL (SELECT count(*) AS n FROM job_held s WHERE s.worker_id = w.id) h ON true
WHERE w.project_id = %(project_id)s
ORDER BY (w.status IN ('active', 'draining')) DESC, w.id DESC
LIMIT %(limit)s

-- name: read_worker_in_flight
-- How many jobs a worker of this project holds (only asked when more are held than the page
-- lists): the held set's rows of the worker.
SELECT count(*) AS n FROM job_held s
WHERE s.worker_id = %(worker_id)s
  AND EXISTS (SELECT 1 FROM workers w WHERE w.id = %(worker_id)s AND w.project_id = %(project_id)s)
