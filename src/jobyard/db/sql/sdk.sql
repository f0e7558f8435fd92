-- name: job_progress_set
-- A handler's progress on the run it holds (ctx.progress), fenced like every worker write.
-- explain: {"id": "$job_id", "seq": 1, "fraction": 0.5, "message": "half way"}
UPDATE jobs
SET progress = %(fraction)s, progress_message = %(message)s, progress_at = now()
WHERE id = %(id)s AND execution_seq = %(seq)s AND worker_id IS NOT DISTINCT FROM %(worker_id)s
  AND status::text IN ('claimed', 'running')  -- ::text: by key, see job_complete_many
RETURNING id

-- name: read_job_outcome
-- What a job handle reports: a job's status, stored result and last error (one project).
-- explain: {}
SELECT j.id, j.status, j.result, j.last_error, j.progress, j.progress_message
FROM jobs j
WHERE j.project_id = %(project_id)s AND j.id = %(job_id)s

-- name: read_jobs_enqueued
-- Jobs of one project waiting to run (queued, scheduled or waiting), oldest first, optionally
-- of one handler and one queue: what the testing helpers assert on.
-- explain: {"handler": null, "queue": null, "limit": 100}
SELECT j.id, j.handler, q.name AS queue, j.payload, j.status, j.priority, j.run_at,
       j.idempotency_key
FROM jobs j
JOIN queues q ON q.id = j.queue_id
WHERE j.project_id = %(project_id)s AND j.status_group IN ('queued', 'scheduled', 'waiting')
  AND j.status IN ('queued', 'scheduled', 'waiting')
  AND (%(handler)s::text IS NULL OR j.handler = %(handler)s::text)
  AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
ORDER BY j.id
LIMIT %(limit)s

-- name: read_jobs_unfinished_count
-- Jobs of the given queues that a worker is running or could run within due_within_s
-- (testing: run_until_idle waits that long for a short retry backoff).
-- explain: {"queues": ["default"], "due_within_s": 1.0}
SELECT count(*) AS n
FROM jobs j
JOIN queues q ON q.id = j.queue_id
WHERE j.project_id = %(project_id)s AND q.name = ANY (%(queues)s::text[])
  AND j.status_group IN ('queued', 'scheduled')  -- queued … running, scheduled (0030)
  AND (j.status IN ('claimed', 'running')
       OR (j.status IN ('queued', 'scheduled')
           AND j.run_at <= now() + make_interval(secs => %(due_within_s)s::float8)
           AND NOT q.is_paused))
