-- name: read_jobs_recent
-- Newest jobs of a project for `jobyard jobs`, optionally filtered by status and queue name.
-- explain: {"status": "queued", "queue": "$queue_name", "limit": 20}
SELECT j.id, q.name AS queue, j.handler, j.status::text AS status, j.attempt, j.max_attempts,
       j.run_at, j.last_error
FROM jobs j
JOIN queues q ON q.id = j.queue_id
WHERE j.project_id = %(project_id)s
  AND (%(status)s::job_status IS NULL
       OR (j.status_group = job_status_group(%(status)s::job_status)
           AND j.status = %(status)s::job_status))
  AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
ORDER BY j.id DESC
LIMIT %(limit)s

-- name: read_listen_jobs
-- Subscribe this session to new-work notifications (payload: the queue id).
LISTEN jobyard_jobs

-- name: read_listen_cancel
-- Subscribe this session to cancel requests (payload: "<job_id>:<worker_id>").
LISTEN jobyard_cancel

-- name: read_listen_queues
-- Subscribe this session to queue-settings changes (pause, resume, limits; payload: queue id).
LISTEN jobyard_queues
