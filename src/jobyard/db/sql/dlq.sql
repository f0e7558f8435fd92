-- name: dlq_get
-- One dead letter within a project.
SELECT * FROM dead_letter_jobs WHERE id = %(id)s AND project_id = %(project_id)s

-- name: dlq_update_payload
-- Edit a dead letter's payload before replaying it.
UPDATE dead_letter_jobs SET payload = %(payload)s
WHERE id = %(id)s AND project_id = %(project_id)s
RETURNING *

-- name: dlq_replay
-- Enqueue a dead letter again as a new job (its own history starts fresh) and link the two.
-- Once: a dead letter already replayed yields no row. Two replays at once (a double click) queue
-- on the row lock, and the second re-reads the row replayed by the first and takes nothing.
WITH letter AS (
    SELECT d.* FROM dead_letter_jobs d
    WHERE d.id = %(id)s AND d.project_id = %(project_id)s AND d.replayed_at IS NULL
    FOR UPDATE
), inserted AS (
    INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, max_attempts)
    SELECT l.project_id, l.queue_id, l.handler, coalesce(%(payload)s, l.payload), 'queued', l.priority,
           coalesce(%(max_attempts)s,
                    (SELECT j.max_attempts FROM jobs j WHERE j.id = l.job_id),
                    (SELECT p.max_attempts FROM queues q JOIN retry_policies p ON p.id = q.retry_policy_id
                     WHERE q.id = l.queue_id),
                    5)
    FROM letter l
    RETURNING *
), linked AS (
    UPDATE dead_letter_jobs d
    SET replayed_at = coalesce(%(now)s, now()), replay_job_id = i.id,
        payload = coalesce(%(payload)s, d.payload)
    FROM inserted i WHERE d.id = %(id)s
)
SELECT i.*, (SELECT count(pg_notify('jobyard_jobs', x.queue_id::text)) FROM inserted x) AS notified
FROM inserted i

-- name: dlq_delete
-- Remove a dead letter for good.
DELETE FROM dead_letter_jobs WHERE id = %(id)s AND project_id = %(project_id)s RETURNING id

-- name: dlq_counts
-- A project's dead letters still waiting (what the overview counts) and those already replayed.
-- explain: {}
SELECT count(*) FILTER (WHERE d.replayed_at IS NULL) AS waiting,
       count(*) FILTER (WHERE d.replayed_at IS NOT NULL) AS replayed
FROM dead_letter_jobs d
WHERE d.project_id = %(project_id)s
