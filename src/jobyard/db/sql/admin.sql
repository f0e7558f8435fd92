-- name: queue_create
-- Create a queue; no row when the named retry policy is not this project's.
INSERT INTO queues (project_id, name, priority, is_paused, max_concurrency, retry_policy_id,
                    default_timeout_ms)
SELECT %(project_id)s, %(name)s, %(priority)s, %(is_paused)s, %(max_concurrency)s,
       %(retry_policy_id)s, %(default_timeout_ms)s
-- A policy id from another project would leak across tenants; refuse it here, in one statement.
WHERE %(retry_policy_id)s::bigint IS NULL
   OR EXISTS (SELECT 1 FROM retry_policies p
              WHERE p.id = %(retry_policy_id)s::bigint AND p.project_id = %(project_id)s)
RETURNING *

-- name: queue_update
-- Change the given settings of a queue (set_x false = leave x); no row if not found or bad policy.
UPDATE queues q
SET priority = CASE WHEN %(set_priority)s THEN %(priority)s::int ELSE q.priority END,
    max_concurrency = CASE WHEN %(set_max_concurrency)s THEN %(max_concurrency)s::int
                           ELSE q.max_concurrency END,
    retry_policy_id = CASE WHEN %(set_retry_policy_id)s THEN %(retry_policy_id)s::bigint
                           ELSE q.retry_policy_id END,
    default_timeout_ms = CASE WHEN %(set_default_timeout_ms)s THEN %(default_timeout_ms)s::int
                              ELSE q.default_timeout_ms END,
    updated_at = coalesce(%(now)s, now())
WHERE q.project_id = %(project_id)s AND q.id = %(queue_id)s
  AND (NOT %(set_retry_policy_id)s OR %(retry_policy_id)s::bigint IS NULL
       OR EXISTS (SELECT 1 FROM retry_policies p
                  WHERE p.id = %(retry_policy_id)s::bigint AND p.project_id = %(project_id)s))
RETURNING q.*

-- name: queue_set_paused
-- Pause or resume a queue; claims skip paused queues at once (the claim reads is_paused).
UPDATE queues
SET is_paused = %(paused)s, updated_at = coalesce(%(now)s, now())
WHERE project_id = %(project_id)s AND id = %(queue_id)s
RETURNING *

-- name: queue_delete_blockers
-- What stops a queue from being deleted: unfinished jobs, and schedules that fire into it.
SELECT (SELECT count(*) FROM jobs j
        WHERE j.project_id = %(project_id)s AND j.queue_id = %(queue_id)s
          -- The status groups of waiting … running (migration 0030): by the group index.
          AND j.status_group IN ('waiting', 'scheduled', 'queued')) AS unfinished_jobs,
       (SELECT count(*) FROM scheduled_jobs s
        WHERE s.project_id = %(project_id)s AND s.queue_id = %(queue_id)s) AS schedules

-- name: queue_delete
-- Delete a queue and (by cascade) its finished history, only if nothing still depends on it.
DELETE FROM queues q
WHERE q.project_id = %(project_id)s AND q.id = %(queue_id)s
  AND NOT EXISTS (SELECT 1 FROM jobs j
                  WHERE j.project_id = q.project_id AND j.queue_id = q.id
                    AND j.status_group IN ('waiting', 'scheduled', 'queued'))
  AND NOT EXISTS (SELECT 1 FROM scheduled_jobs s WHERE s.queue_id = q.id)
RETURNING q.id

-- name: queue_exists
-- Whether a queue id belongs to a project.
SELECT id FROM queues WHERE project_id = %(project_id)s AND id = %(queue_id)s

-- name: policy_create
-- Create a retry policy in a project.
INSERT INTO retry_policies (project_id, name, backoff, base_delay_ms, max_delay_ms,
                            max_attempts, jitter)
VALUES (%(project_id)s, %(name)s, %(backoff)s::backoff_kind, %(base_delay_ms)s,
        %(max_delay_ms)s, %(max_attempts)s, %(jitter)s)
RETURNING *

-- name: policy_update
-- Change the given fields of a retry policy (set_x false = leave x).
UPDATE retry_policies p
SET name = CASE WHEN %(set_name)s THEN %(name)s::text ELSE p.name END,
    backoff = CASE WHEN %(set_backoff)s THEN %(backoff)s::backoff_kind ELSE p.backoff END,
    base_delay_ms = CASE WHEN %(set_base_delay_ms)s THEN %(base_delay_ms)s::int
                         ELSE p.base_delay_ms END,
    max_delay_ms = CASE WHEN %(set_max_delay_ms)s THEN %(max_delay_ms)s::int
                        ELSE p.max_delay_ms END,
    max_attempts = CASE WHEN %(set_max_attempts)s THEN %(max_attempts)s::int
                        ELSE p.max_attempts END,
    jitter = CASE WHEN %(set_jitter)s THEN %(jitter)s::boolean ELSE p.jitter END
WHERE p.project_id = %(project_id)s AND p.id = %(policy_id)s
RETURNING p.*

-- name: policy_delete
-- Delete a retry policy; queues and jobs that used it fall back to the defaults (SET NULL).
DELETE FROM retry_policies WHERE project_id = %(project_id)s AND id = %(policy_id)s
RETURNING id
