-- name: schedule_insert
-- Create a schedule on a queue of this project; no row when the queue is not in the project.
INSERT INTO scheduled_jobs (project_id, queue_id, name, cron, timezone, handler, payload, priority,
                            max_attempts, timeout_ms, overlap, enabled, next_run_at,
                            created_at, updated_at)
SELECT q.project_id, q.id, %(name)s, %(cron)s, %(timezone)s, %(handler)s, %(payload)s, %(priority)s,
       %(max_attempts)s, %(timeout_ms)s, %(overlap)s::overlap_policy, %(enabled)s, %(next_run_at)s,
       coalesce(%(now)s, now()), coalesce(%(now)s, now())
FROM queues q
WHERE q.id = %(queue_id)s AND q.project_id = %(project_id)s
RETURNING *

-- name: schedule_get
-- One schedule within a project.
SELECT * FROM scheduled_jobs WHERE id = %(id)s AND project_id = %(project_id)s

-- name: schedule_lock
-- One schedule within a project, locked for a read-modify-write update.
SELECT * FROM scheduled_jobs WHERE id = %(id)s AND project_id = %(project_id)s FOR UPDATE

-- name: schedule_update
-- Write every editable field of a schedule (already validated and merged); the queue must be
-- in the same project.
UPDATE scheduled_jobs s
SET name = %(name)s, queue_id = q.id, cron = %(cron)s, timezone = %(timezone)s,
    handler = %(handler)s, payload = %(payload)s, priority = %(priority)s,
    max_attempts = %(max_attempts)s, timeout_ms = %(timeout_ms)s,
    overlap = %(overlap)s::overlap_policy, enabled = %(enabled)s, next_run_at = %(next_run_at)s,
    updated_at = coalesce(%(now)s, now())
FROM queues q
WHERE s.id = %(id)s AND s.project_id = %(project_id)s
  AND q.id = %(queue_id)s AND q.project_id = s.project_id
RETURNING s.*

-- name: schedule_delete
-- Remove a schedule; the jobs it fired keep running (their schedule_id is nulled).
DELETE FROM scheduled_jobs WHERE id = %(id)s AND project_id = %(project_id)s RETURNING id

-- name: schedule_lock_due
-- Lock up to `batch` due, enabled schedules; replicas skip rows another replica holds.
-- explain: {"batch": 100, "now": null}
SELECT s.id, s.queue_id, s.cron, s.timezone, s.overlap, s.next_run_at, s.last_job_id,
       -- Overlap 'skip' reads this: a fire is skipped while the previous one is unfinished.
       lj.status AS last_job_status,
       coalesce(%(now)s, now()) AS db_now
FROM scheduled_jobs s
LEFT JOIN jobs lj ON lj.id = s.last_job_id
WHERE s.enabled AND s.next_run_at <= coalesce(%(now)s, now())
ORDER BY s.next_run_at
LIMIT %(batch)s
FOR UPDATE OF s SKIP LOCKED

-- name: schedule_fire
-- Enqueue one fire (idempotent on 'cron:<id>:<fire time>') and advance the schedule, in one
-- statement; the caller holds the schedule's row lock from schedule_lock_due.
WITH sched AS (
    SELECT s.id, s.project_id, s.queue_id, s.handler, s.payload, s.priority,
           -- The schedule's own limits, else the queue's policy, else the engine default.
           coalesce(s.max_attempts, p.max_attempts, 5) AS max_attempts,
           coalesce(s.timeout_ms, q.default_timeout_ms) AS timeout_ms
    FROM scheduled_jobs s
    JOIN queues q ON q.id = s.queue_id
    LEFT JOIN retry_policies p ON p.id = q.retry_policy_id
    WHERE s.id = %(schedule_id)s
), fired AS (
    -- A second replica (or a rewound next_run_at) hits the idempotency index and adds nothing.
    INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                      max_attempts, timeout_ms, idempotency_key, schedule_id, created_at, updated_at)
    SELECT sched.project_id, sched.queue_id, sched.handler, sched.payload, 'queued', sched.priority,
           %(fire_at)s, sched.max_attempts, sched.timeout_ms, %(idempotency_key)s, sched.id,
           coalesce(%(now)s, now()), coalesce(%(now)s, now())
    FROM sched
    ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue_id
), job AS (
    SELECT f.id, true AS created FROM fired f
    UNION ALL
    SELECT j.id, false FROM jobs j, sched
    WHERE j.queue_id = sched.queue_id AND j.idempotency_key = %(idempotency_key)s
      AND NOT EXISTS (SELECT 1 FROM fired)
), advanced AS (
    UPDATE scheduled_jobs s
    SET next_run_at = %(next_run_at)s, last_fired_at = %(fire_at)s,
        last_job_id = coalesce((SELECT id FROM job LIMIT 1), s.last_job_id),
        updated_at = coalesce(%(now)s, now())
    WHERE s.id = %(schedule_id)s
    RETURNING s.id
)
SELECT (SELECT id FROM job LIMIT 1) AS job_id,
       coalesce((SELECT created FROM job LIMIT 1), false) AS created,
       (SELECT count(*) FROM advanced) AS advanced,
       -- NOTIFY wakes idle workers of this queue at commit (engine rule 7).
       (SELECT count(pg_notify('jobyard_jobs', f.queue_id::text)) FROM fired f) AS notified

-- name: schedule_advance
-- Move a schedule to its next fire time without firing (overlap skip; NULL parks a broken one).
UPDATE scheduled_jobs
SET next_run_at = %(next_run_at)s, updated_at = coalesce(%(now)s, now())
WHERE id = %(schedule_id)s

-- name: schedule_next_due
-- Seconds until the earliest enabled schedule is due (negative when overdue, NULL when none).
-- explain: {"now": null}
SELECT extract(epoch FROM min(next_run_at) - coalesce(%(now)s, now()))::float8 AS seconds
FROM scheduled_jobs
WHERE enabled

-- name: schedule_trigger
-- Fire a schedule once now, by hand: a queued job from its template (its next_run_at is left as it is).
WITH sched AS (
    SELECT s.id, s.project_id, s.queue_id, s.handler, s.payload, s.priority,
           coalesce(s.max_attempts, p.max_attempts, 5) AS max_attempts,
           coalesce(s.timeout_ms, q.default_timeout_ms) AS timeout_ms
    FROM scheduled_jobs s
    JOIN queues q ON q.id = s.queue_id
    LEFT JOIN retry_policies p ON p.id = q.retry_policy_id
    WHERE s.id = %(schedule_id)s AND s.project_id = %(project_id)s
    FOR UPDATE OF s
), fired AS (
    INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                      max_attempts, timeout_ms, schedule_id, created_at, updated_at)
    SELECT sched.project_id, sched.queue_id, sched.handler, sched.payload, 'queued', sched.priority,
           coalesce(%(now)s, now()), sched.max_attempts, sched.timeout_ms, sched.id,
           coalesce(%(now)s, now()), coalesce(%(now)s, now())
    FROM sched
    RETURNING id, queue_id
), noted AS (
    UPDATE scheduled_jobs s SET last_job_id = f.id, updated_at = coalesce(%(now)s, now())
    FROM fired f WHERE s.id = %(schedule_id)s
)
SELECT f.id AS job_id, (SELECT count(pg_notify('jobyard_jobs', x.queue_id::text)) FROM fired x) AS notified
FROM fired f
