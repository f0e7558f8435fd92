-- name: batch_cancel_pending
-- Cancel the batch's jobs that no worker holds yet (the trigger counts them on the row of a
-- batch with callbacks; job_batch_progress counts them for one without).
-- explain: {"batch_id": 1, "reason": "batch cancelled"}
UPDATE jobs
SET status = 'cancelled', finished_at = coalesce(%(now)s, now()), updated_at = coalesce(%(now)s, now()),
    cancel_requested_at = coalesce(%(now)s, now()), cancel_reason = %(reason)s
WHERE project_id = %(project_id)s AND batch_id = %(batch_id)s
  AND status IN ('waiting', 'scheduled', 'queued')
RETURNING id

-- name: batch_request_cancel
-- Ask the workers holding the batch's running jobs to stop them.
-- explain: {"batch_id": 1}
WITH requested AS (
    UPDATE jobs
    SET cancel_requested_at = coalesce(cancel_requested_at, coalesce(%(now)s, now())),
        updated_at = coalesce(%(now)s, now())
    WHERE project_id = %(project_id)s AND batch_id = %(batch_id)s AND status IN ('claimed', 'running')
    RETURNING id, worker_id
)
SELECT r.id, pg_notify('jobyard_cancel', r.id::text || ':' || r.worker_id::text) AS notified
FROM requested r

-- name: workflow_cancel_pending
-- Cancel the workflow's steps (given by id) that no worker holds yet.
-- explain: {"ids": ["$job_id"], "reason": "workflow cancelled"}
UPDATE jobs
SET status = 'cancelled', finished_at = coalesce(%(now)s, now()), updated_at = coalesce(%(now)s, now()),
    cancel_requested_at = coalesce(%(now)s, now()), cancel_reason = %(reason)s
WHERE project_id = %(project_id)s AND id = ANY(%(ids)s::bigint[])
  AND status IN ('waiting', 'scheduled', 'queued')
RETURNING id

-- name: workflow_request_cancel
-- Ask the workers holding the workflow's running steps to stop them.
-- explain: {"ids": ["$job_id"]}
WITH requested AS (
    UPDATE jobs
    SET cancel_requested_at = coalesce(cancel_requested_at, coalesce(%(now)s, now())),
        updated_at = coalesce(%(now)s, now())
    -- ::text: by key, see job_complete_many
    WHERE project_id = %(project_id)s AND id = ANY(%(ids)s::bigint[])
      AND status::text IN ('claimed', 'running')
    RETURNING id, worker_id
)
SELECT r.id, pg_notify('jobyard_cancel', r.id::text || ':' || r.worker_id::text) AS notified
FROM requested r

-- name: read_workflow_members
-- The jobs connected to a job through dependencies, in either direction (bounded).
-- explain: {"limit": 500}
WITH RECURSIVE member(id) AS (
    SELECT j.id FROM jobs j WHERE j.id = %(job_id)s AND j.project_id = %(project_id)s
    UNION
    SELECT n.id FROM member m, LATERAL (
        SELECT d.depends_on_job_id AS id FROM job_dependencies d WHERE d.job_id = m.id
        UNION ALL
        SELECT d.job_id FROM job_dependencies d WHERE d.depends_on_job_id = m.id
    ) n
)
SELECT j.id, j.handler, j.status, j.queue_id, q.name AS queue, j.batch_id, j.attempt,
       j.max_attempts, j.cancel_reason, j.last_error, j.created_at, j.finished_at
FROM (SELECT id FROM member LIMIT %(limit)s) m
JOIN jobs j ON j.id = m.id AND j.project_id = %(project_id)s
JOIN queues q ON q.id = j.queue_id
ORDER BY j.id

-- name: read_workflow_edges
-- The dependency edges among the given jobs.
-- explain: {"ids": ["$job_id"]}
SELECT d.job_id, d.depends_on_job_id, d.run_anyway
FROM job_dependencies d
WHERE d.job_id = ANY(%(ids)s::bigint[]) AND d.depends_on_job_id = ANY(%(ids)s::bigint[])
ORDER BY d.depends_on_job_id, d.job_id

-- name: read_job_parent_results
-- A job's parents with their status and result (what ctx.parent_results returns).
-- explain: {}
SELECT p.id, p.status, p.result
FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on_job_id
WHERE d.job_id = %(job_id)s
ORDER BY p.id

-- name: read_job_parents
-- A job's parents (id, handler, status), for the job page and the explainer.
-- explain: {}
SELECT p.id, p.handler, p.status, d.run_anyway
FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on_job_id
WHERE d.job_id = %(job_id)s AND p.project_id = %(project_id)s
ORDER BY p.id

-- name: read_batch_get
-- One batch with its counts: the row's counters for a batch with callbacks (kept by the
-- jobs_final_effects trigger), a count of its jobs for one without (job_batch_progress, 0013).
-- explain: {"batch_id": 1}
SELECT b.id, b.project_id, q.name AS queue, b.size, b.done, b.failed, b.cancelled,
       b.size - b.done - b.failed - b.cancelled AS pending, b.callbacks, b.completed_at,
       b.callback_job_ids, b.created_at
FROM job_batch_progress b JOIN queues q ON q.id = b.queue_id
WHERE b.id = %(batch_id)s AND b.project_id = %(project_id)s

-- name: read_job_in_workflow
-- Whether a job has parents or children (its page links to the workflow).
-- explain: {}
SELECT EXISTS (SELECT FROM job_dependencies WHERE job_id = %(job_id)s)
    OR EXISTS (SELECT FROM job_dependencies WHERE depends_on_job_id = %(job_id)s) AS linked

-- name: read_job_outcomes
-- Status and result of the given jobs of a project (what WorkflowRun.wait polls).
-- explain: {"ids": ["$job_id"]}
SELECT id, status, result FROM jobs
WHERE project_id = %(project_id)s AND id = ANY(%(ids)s::bigint[])
ORDER BY id
