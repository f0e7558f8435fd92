-- name: action_retry
-- Retry now: failed, dead-lettered or cancelled jobs → queued at once (compare-and-set on the given from-states), with one more attempt if they had used all of theirs; their dead letters are marked replayed into the same job. A job the failure policy cancelled because a parent failed is not retried on its own: retrying that parent revives it (action_revive_dependents).
-- explain: {"ids": ["$job_id"], "from_states": ["dead_letter"]}
WITH target AS (
    UPDATE jobs
    SET status = 'queued', run_at = coalesce(%(now)s, now()), finished_at = NULL,
        cancel_requested_at = NULL, cancel_reason = NULL, worker_id = NULL,
        max_attempts = least(100, greatest(max_attempts, attempt + 1)),
        updated_at = coalesce(%(now)s, now())
    WHERE project_id = %(project_id)s AND id = ANY(%(ids)s::bigint[])
      AND status = ANY(%(from_states)s::job_status[])
      AND coalesce(cancel_reason, '') NOT LIKE 'dependency failed:%%'
      -- A dead letter of this job already replayed into a new job carries its work on: a
      -- retry here would run it a second time.
      AND NOT EXISTS (SELECT 1 FROM dead_letter_jobs d
                      WHERE d.job_id = jobs.id AND d.replay_job_id <> jobs.id)
    RETURNING id, queue_id
), letters AS (
    UPDATE dead_letter_jobs d
    SET replayed_at = coalesce(%(now)s, now()), replay_job_id = t.id
    FROM target t
    WHERE d.job_id = t.id AND d.replayed_at IS NULL
)
SELECT t.id,
       (SELECT count(pg_notify('jobyard_jobs', x.queue_id::text))
        FROM (SELECT DISTINCT queue_id FROM target) x) AS notified
FROM target t

-- name: action_revive_dependents
-- The descendants the failure policy cancelled because of the given (just retried) jobs go back to waiting, so their workflow continues; the parents' next final transition decides them (the jobs_final_effects trigger).
-- explain: {"ids": ["$job_id"]}
WITH RECURSIVE revived(id) AS (
    SELECT d.job_id FROM job_dependencies d JOIN jobs c ON c.id = d.job_id
    WHERE d.depends_on_job_id = ANY(%(ids)s::bigint[]) AND c.status = 'cancelled'
      AND c.cancel_reason LIKE 'dependency failed:%%'
    UNION
    SELECT d.job_id FROM revived r
    JOIN job_dependencies d ON d.depends_on_job_id = r.id
    JOIN jobs c ON c.id = d.job_id
    WHERE c.status = 'cancelled' AND c.cancel_reason LIKE 'dependency failed:%%'
)
UPDATE jobs
SET status = 'waiting', finished_at = NULL, cancel_requested_at = NULL, cancel_reason = NULL,
    updated_at = coalesce(%(now)s, now())
WHERE project_id = %(project_id)s AND id IN (SELECT id FROM revived) AND status = 'cancelled'
RETURNING id

-- name: action_recheck_failed_parents
-- Revived jobs that still have a failed parent (another branch) are cancelled again, naming it.
-- explain: {"ids": ["$job_id"]}
UPDATE jobs c
SET status = 'cancelled', finished_at = coalesce(%(now)s, now()), updated_at = coalesce(%(now)s, now()),
    cancel_requested_at = coalesce(%(now)s, now()),
    cancel_reason = format('dependency failed: parent job %%s ended %%s', f.pid, f.pstatus)
FROM (
    SELECT DISTINCT ON (d.job_id) d.job_id, p.id AS pid, p.status::text AS pstatus
    FROM job_dependencies d JOIN jobs p ON p.id = d.depends_on_job_id
    WHERE d.job_id = ANY(%(ids)s::bigint[]) AND NOT d.run_anyway
      AND p.status IN ('dead_letter', 'cancelled')
    ORDER BY d.job_id, p.id
) f
WHERE c.id = f.job_id AND c.status = 'waiting'
RETURNING c.id

-- name: action_run_now
-- Run now: scheduled jobs (delayed or backing off) → queued at once (compare-and-set).
-- explain: {"ids": ["$job_id"], "from_states": ["scheduled"]}
WITH target AS (
    UPDATE jobs
    SET status = 'queued', run_at = coalesce(%(now)s, now()), updated_at = coalesce(%(now)s, now())
    WHERE project_id = %(project_id)s AND id = ANY(%(ids)s::bigint[])
      AND status = ANY(%(from_states)s::job_status[])
    RETURNING id, queue_id
)
SELECT t.id,
       (SELECT count(pg_notify('jobyard_jobs', x.queue_id::text))
        FROM (SELECT DISTINCT queue_id FROM target) x) AS notified
FROM target t

-- name: action_cancel
-- Cancel many: jobs no worker holds → cancelled at once; held ones get a cancel request their worker hears (jobyard_cancel) or reads at its next heartbeat.
-- explain: {"ids": ["$job_id"], "pending_states": ["queued"], "held_states": ["running"]}
WITH pending AS (
    UPDATE jobs
    SET status = 'cancelled', finished_at = coalesce(%(now)s, now()),
        updated_at = coalesce(%(now)s, now()), cancel_requested_at = coalesce(%(now)s, now())
    WHERE project_id = %(project_id)s AND id = ANY(%(ids)s::bigint[])
      AND status = ANY(%(pending_states)s::job_status[])
    RETURNING id
), held AS (
    UPDATE jobs
    SET cancel_requested_at = coalesce(%(now)s, now()), updated_at = coalesce(%(now)s, now())
    WHERE project_id = %(project_id)s AND id = ANY(%(ids)s::bigint[])
      AND status = ANY(%(held_states)s::job_status[]) AND cancel_requested_at IS NULL
    RETURNING id, worker_id
)
SELECT (SELECT count(*) FROM pending) AS cancelled,
       (SELECT count(*) FROM held) AS requested,
       (SELECT count(pg_notify('jobyard_cancel', h.id::text || ':' || h.worker_id::text))
        FROM held h) AS notified

-- name: action_delete
-- Delete jobs no worker holds (their runs and logs go with them; dead letters keep their copy).
-- explain: {"ids": ["$job_id"], "from_states": ["done"]}
DELETE FROM jobs
WHERE project_id = %(project_id)s AND id = ANY(%(ids)s::bigint[])
  AND status = ANY(%(from_states)s::job_status[])
RETURNING id

-- name: action_select_batch
-- One batch of an explorer filter's jobs in the given states, newest first below a cursor (bulk actions walk the filter in bounded batches).
-- explain: {"before_id": null, "statuses": ["queued"], "queue": null, "handler": null, "created_from": null, "created_to": null, "fingerprint": null, "limit": 500}
SELECT j.id
FROM jobs j
JOIN queues q ON q.id = j.queue_id
WHERE j.project_id = %(project_id)s
  AND (%(before_id)s::bigint IS NULL OR j.id < %(before_id)s::bigint)
  -- The group too: jobs_project_group_idx names it (migration 0030).
  AND j.status_group = ANY (job_status_groups(%(statuses)s::job_status[]))
  AND j.status = ANY(%(statuses)s::job_status[])
  AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
  AND (%(handler)s::text IS NULL OR j.handler = %(handler)s::text)
  AND (%(created_from)s::timestamptz IS NULL OR j.created_at >= %(created_from)s::timestamptz)
  AND (%(created_to)s::timestamptz IS NULL OR j.created_at < %(created_to)s::timestamptz)
  AND (%(fingerprint)s::text IS NULL OR j.error_fingerprint = %(fingerprint)s::text)
ORDER BY j.id DESC
LIMIT %(limit)s

-- name: action_job_status
-- The current status of one job of a project, why it was cancelled, and the job its dead letter was replayed as (to explain a refused action).
SELECT j.status::text AS status, j.cancel_reason,
       (SELECT d.replay_job_id FROM dead_letter_jobs d
        WHERE d.job_id = j.id AND d.replay_job_id <> j.id
        ORDER BY d.id DESC LIMIT 1) AS replayed_as
FROM jobs j
WHERE j.project_id = %(project_id)s AND j.id = %(job_id)s

-- name: action_discard_letters
-- Delete the dead letters of the given jobs (a failure group's "discard all" removes both).
-- explain: {"ids": ["$job_id"]}
DELETE FROM dead_letter_jobs d
WHERE d.project_id = %(project_id)s AND d.job_id = ANY(%(ids)s::bigint[])
RETURNING d.id

-- name: action_count
-- How many jobs an explorer filter selects in the given states, up to a cap (what a bulk action's confirmation names).
-- explain: {"statuses": ["queued"], "queue": null, "handler": null, "created_from": null, "created_to": null, "fingerprint": null, "cap": 100000}
SELECT count(*) AS n FROM (
    SELECT 1
    FROM jobs j
    JOIN queues q ON q.id = j.queue_id
    WHERE j.project_id = %(project_id)s
      AND j.status_group = ANY (job_status_groups(%(statuses)s::job_status[]))
      AND j.status = ANY(%(statuses)s::job_status[])
      AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
      AND (%(handler)s::text IS NULL OR j.handler = %(handler)s::text)
      AND (%(created_from)s::timestamptz IS NULL OR j.created_at >= %(created_from)s::timestamptz)
      AND (%(created_to)s::timestamptz IS NULL OR j.created_at < %(created_to)s::timestamptz)
      AND (%(fingerprint)s::text IS NULL OR j.error_fingerprint = %(fingerprint)s::text)
    LIMIT %(cap)s
) s
