-- name: why_job_context
-- One job with what explains its state: its queue, the queue's slots, the live workers that listen to it (and know its handler), the worker that holds it, and its last failed run.
-- explain: {"stale_s": 15}
SELECT coalesce(%(now)s, now()) AS now,
       j.id, j.project_id, j.queue_id, j.status, j.handler, j.priority, j.run_at, j.attempt,
       j.max_attempts, j.execution_seq, j.last_error, j.worker_id, j.lock_expires_at,
       j.cancel_requested_at, j.cancel_reason, j.finished_at,
       q.name AS queue, q.is_paused, q.max_concurrency,
       -- The held set (job_held) holds exactly the held jobs, bounded by capacity.
       (SELECT count(*) FROM job_held h WHERE h.queue_id = j.queue_id) AS in_flight,
       -- Live: active and heard from within stale_s (the sweeper marks the silent ones dead later).
       (SELECT count(*) FROM workers w
        WHERE w.project_id = j.project_id AND w.status = 'active' AND q.name = ANY(w.queues)
          AND w.last_heartbeat_at > coalesce(%(now)s, now()) - make_interval(secs => %(stale_s)s))
           AS live_workers,
       -- A worker that did not report its handlers (NULL) is taken to know this one.
       (SELECT count(*) FROM workers w
        WHERE w.project_id = j.project_id AND w.status = 'active' AND q.name = ANY(w.queues)
          AND w.last_heartbeat_at > coalesce(%(now)s, now()) - make_interval(secs => %(stale_s)s)
          AND (w.handlers IS NULL OR j.handler = ANY(w.handlers))) AS live_handler_workers,
       (SELECT max(w.last_heartbeat_at) FROM workers w
        WHERE w.project_id = j.project_id AND q.name = ANY(w.queues)) AS queue_last_seen_at,
       hw.name AS holder_name, hw.status::text AS holder_status,
       hw.last_heartbeat_at AS holder_heartbeat_at, hw.loop_stall AS holder_loop_stall,
       (SELECT e.error FROM job_executions e
        WHERE e.job_id = j.id AND e.error IS NOT NULL
        ORDER BY e.execution_seq DESC LIMIT 1) AS last_run_error
FROM jobs j
JOIN queues q ON q.id = j.queue_id
LEFT JOIN workers hw ON hw.id = j.worker_id
WHERE j.project_id = %(project_id)s AND j.id = %(job_id)s

-- name: why_worker_health
-- Workers of the project that listen to a queue and are not dead or stopped, that an operator
-- paused, whose event loop is blocked now or whose handler threads outlived their runs.
-- explain: {"queue": "$queue_name", "limit": 10}
SELECT w.id, w.name, w.status, w.concurrency, w.orphan_threads, w.loop_stall, w.paused_at,
       w.paused_by
FROM workers w
WHERE w.project_id = %(project_id)s AND w.status IN ('active', 'draining')
  AND %(queue)s = ANY (w.queues)
  AND (w.orphan_threads > 0 OR w.loop_stall @> '{"ongoing": true}' OR w.paused_at IS NOT NULL)
ORDER BY w.id
LIMIT %(limit)s

-- name: why_slot_holders
-- The jobs holding a queue's concurrency slots (oldest lease first), for "queue at its limit".
-- explain: {"limit": 10}
-- Found in the held set, each read by key (status::text: by key, see job_complete_many).
SELECT h.id, h.worker_id, h.status::text AS status, h.lock_expires_at
FROM jobs h
WHERE h.id = ANY (ARRAY(SELECT s.job_id FROM job_held s WHERE s.queue_id = %(queue_id)s))
  AND h.status::text IN ('claimed', 'running')
ORDER BY h.lock_expires_at, h.id
LIMIT %(limit)s

-- name: why_parents
-- A job's parents (the jobs it depends on) with their states.
-- explain: {"limit": 50}
SELECT p.id, p.status::text AS status, p.handler, q.name AS queue, p.finished_at
FROM job_dependencies d
JOIN jobs p ON p.id = d.depends_on_job_id
JOIN queues q ON q.id = p.queue_id
WHERE d.job_id = %(job_id)s
ORDER BY p.id
LIMIT %(limit)s

-- name: why_position
-- Queued jobs claimed before this one (higher priority, or equal priority and earlier run_at, id), counted up to a cap as one range of job_ready_claim_idx in the claim's order (-priority, run_at, job_id; migration 0027), and the jobs of the queue finished in the last five minutes (its drain rate).
-- explain: {"priority": 0, "run_at": null, "cap": 10000}
SELECT
    (SELECT count(*) FROM (
        SELECT 1 FROM job_ready a
        WHERE a.queue_id = %(queue_id)s
          AND (- a.priority, a.run_at, a.job_id)
              < (- %(priority)s::integer, %(run_at)s::timestamptz, %(job_id)s::bigint)
        LIMIT %(cap)s) s) AS ahead,
    -- jobs_finished_idx bounds this by five minutes of the whole cluster's finishes.
    (SELECT count(*) FROM jobs f
     WHERE f.finished_at >= coalesce(%(now)s, now()) - interval '5 minutes'
       AND f.queue_id = %(queue_id)s) AS finished_5m
