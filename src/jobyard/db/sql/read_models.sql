-- name: read_queues_page
-- Queues of a project, keyset by id ascending, with their policy name.
-- explain: {"after_id": null, "limit": 51}
SELECT q.*, p.name AS retry_policy_name
FROM queues q
LEFT JOIN retry_policies p ON p.id = q.retry_policy_id
WHERE q.project_id = %(project_id)s
  AND (%(after_id)s::bigint IS NULL OR q.id > %(after_id)s::bigint)
ORDER BY q.id
LIMIT %(limit)s

-- name: read_queue_get
-- One queue of a project, with its policy name.
SELECT q.*, p.name AS retry_policy_name
FROM queues q
LEFT JOIN retry_policies p ON p.id = q.retry_policy_id
WHERE q.project_id = %(project_id)s AND q.id = %(queue_id)s

-- name: read_retry_policies_page
-- Retry policies of a project, keyset by id ascending, with how many queues use each.
SELECT p.*, (SELECT count(*) FROM queues q WHERE q.retry_policy_id = p.id) AS queue_count
FROM retry_policies p
WHERE p.project_id = %(project_id)s
  AND (%(after_id)s::bigint IS NULL OR p.id > %(after_id)s::bigint)
ORDER BY p.id
LIMIT %(limit)s

-- name: read_retry_policy_get
-- One retry policy of a project, with how many queues use it.
SELECT p.*, (SELECT count(*) FROM queues q WHERE q.retry_policy_id = p.id) AS queue_count
FROM retry_policies p
WHERE p.project_id = %(project_id)s AND p.id = %(policy_id)s

-- name: read_jobs_page
-- The job explorer: newest first, keyset on id, every filter optional (NULL = not filtered).
-- explain: {"before_id": null, "statuses": null, "queue": null, "handler": null, "created_from": null, "created_to": null, "min_id": null, "max_id": null, "fingerprint": null, "limit": 51}
SELECT j.id, q.name AS queue, j.queue_id, j.handler, j.status, j.priority, j.run_at,
       j.attempt, j.max_attempts, j.execution_seq, j.idempotency_key, j.batch_id,
       j.schedule_id, j.worker_id, j.claimed_at, j.started_at, j.finished_at,
       j.cancel_requested_at, j.last_error, j.error_fingerprint, j.timeout_ms,
       j.created_at, j.updated_at
FROM jobs j
JOIN queues q ON q.id = j.queue_id
WHERE j.project_id = %(project_id)s
  -- Keyset, not OFFSET: rows inserted meanwhile get larger ids and never shift later pages.
  AND (%(before_id)s::bigint IS NULL OR j.id < %(before_id)s::bigint)
  -- The group as well as the status: jobs_project_group_idx names the group (migration 0030).
  AND (%(statuses)s::job_status[] IS NULL
       OR (j.status_group = ANY (job_status_groups(%(statuses)s::job_status[]))
           AND j.status = ANY(%(statuses)s::job_status[])))
  AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
  AND (%(handler)s::text IS NULL OR j.handler = %(handler)s::text)
  -- A created_at window walks only its id range (read_job_id_at): no created_at index.
  AND (%(min_id)s::bigint IS NULL OR j.id >= %(min_id)s::bigint)
  AND (%(max_id)s::bigint IS NULL OR j.id < %(max_id)s::bigint)
  AND (%(created_from)s::timestamptz IS NULL OR j.created_at >= %(created_from)s::timestamptz)
  AND (%(created_to)s::timestamptz IS NULL OR j.created_at < %(created_to)s::timestamptz)
  AND (%(fingerprint)s::text IS NULL OR j.error_fingerprint = %(fingerprint)s::text)
ORDER BY j.id DESC
LIMIT %(limit)s

-- name: read_job_id_at
-- The smallest id x such that the first job at or above x was created at or after %(at)s: ids
-- are handed out in creation order, so this bisects the primary key (about log2(ids) index
-- probes, ~20 at 1,000,000 jobs) instead of keeping a created_at index every enqueue would pay
-- for. A filter `created_at >= at` then scans only ids >= x. Across all projects (one sequence).
-- explain: {"at": "2026-01-01T00:00:00Z"}
WITH RECURSIVE b(lo, hi) AS (
    SELECT min(j.id), max(j.id) + 1 FROM jobs j
    UNION ALL
    -- Probe the first job at or above the midpoint: created at or after `at` → the answer is at
    -- most the midpoint; before → it is above that job's id.
    SELECT CASE WHEN p.id IS NULL OR p.created_at >= %(at)s::timestamptz THEN b.lo
                ELSE p.id + 1 END,
           CASE WHEN p.id IS NULL OR p.created_at >= %(at)s::timestamptz
                THEN b.lo + (b.hi - b.lo) / 2 ELSE b.hi END
    FROM b
    LEFT JOIN LATERAL (
        SELECT j.id, j.created_at FROM jobs j
        WHERE j.id >= b.lo + (b.hi - b.lo) / 2
        ORDER BY j.id
        LIMIT 1
    ) p ON true
    WHERE b.lo < b.hi
)
SELECT max(b.lo) AS id FROM b

-- name: read_job_get
-- One job of a project with its queue name.
-- explain: {}
SELECT j.*, q.name AS queue
FROM jobs j
JOIN queues q ON q.id = j.queue_id
WHERE j.project_id = %(project_id)s AND j.id = %(job_id)s

-- name: read_job_execution_summary
-- Per-job execution counts by outcome (the summary shown with a job); a held job's run in
-- flight has no job_executions row yet and is counted from the job row as open.
-- explain: {}
WITH job AS (
    SELECT j.id, j.status, j.execution_seq FROM jobs j
    WHERE j.project_id = %(project_id)s AND j.id = %(job_id)s
), runs AS (
    SELECT e.outcome, e.execution_seq FROM job_executions e JOIN job ON e.job_id = job.id
    UNION ALL
    SELECT NULL::execution_outcome, job.execution_seq FROM job
    WHERE job.status IN ('claimed', 'running')
)
SELECT count(*) AS total,
       count(*) FILTER (WHERE r.outcome IS NULL) AS open,
       count(*) FILTER (WHERE r.outcome = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE r.outcome IN ('failed', 'timed_out')) AS failed,
       count(*) FILTER (WHERE r.outcome = 'lease_lost') AS lease_lost,
       count(*) FILTER (WHERE r.outcome = 'released') AS released,
       count(*) FILTER (WHERE r.outcome = 'cancelled') AS cancelled,
       max(r.execution_seq) AS last_execution_seq
FROM runs r

-- name: read_job_executions_page
-- Runs of one job in order, keyset on execution_seq (the identity of a run). Finished runs
-- come from job_executions; the run in flight of a held job from the job row (outcome,
-- finished_at and id NULL: its row is written when it ends).
-- explain: {"after_seq": null, "limit": 51}
WITH job AS (
    SELECT j.id, j.status, j.execution_seq, j.attempt, j.worker_id,
           coalesce(j.started_at, j.claimed_at) AS started_at
    FROM jobs j
    WHERE j.project_id = %(project_id)s AND j.id = %(job_id)s
)
SELECT r.* FROM (
    SELECT e.id, e.job_id, e.execution_seq, e.attempt, e.worker_id, e.outcome, e.attempt_charged,
           e.started_at, e.finished_at, e.duration_ms, e.error, e.error_fingerprint, e.traceback
    FROM job_executions e JOIN job ON e.job_id = job.id
    WHERE (%(after_seq)s::int IS NULL OR e.execution_seq > %(after_seq)s::int)
    UNION ALL
    SELECT NULL::bigint, job.id, job.execution_seq, job.attempt, job.worker_id,
           NULL::execution_outcome, true, job.started_at, NULL::timestamptz, NULL::int,
           NULL::text, NULL::text, NULL::text
    FROM job
    WHERE job.status IN ('claimed', 'running')
      AND (%(after_seq)s::int IS NULL OR job.execution_seq > %(after_seq)s::int)
) r
ORDER BY r.execution_seq
LIMIT %(limit)s

-- name: read_job_logs_page
-- Log lines of one job, oldest first, keyset on id; optionally one run only.
-- explain: {"after_id": null, "execution_seq": null, "limit": 101}
SELECT l.id, l.job_id, l.execution_seq, l.level, l.message, l.fields, l.created_at
FROM job_logs l
JOIN jobs j ON j.id = l.job_id
WHERE j.project_id = %(project_id)s AND l.job_id = %(job_id)s
  AND (%(after_id)s::bigint IS NULL OR l.id > %(after_id)s::bigint)
  AND (%(execution_seq)s::int IS NULL OR l.execution_seq = %(execution_seq)s::int)
ORDER BY l.id
LIMIT %(limit)s

-- name: read_workers_page
-- Workers of a project, newest first, keyset on id; in-flight counted from held jobs.
-- explain: {"before_id": null, "statuses": null, "limit": 51}
SELECT w.id, w.name, w.hostname, w.pid, w.queues, w.concurrency AS capacity, w.status,
       w.started_at, w.last_heartbeat_at, w.stopped_at,
       coalesce(h.n, 0) AS in_flight, w.orphan_threads, w.loop_stalls, w.loop_stall, w.paused_at,
       w.paused_by
FROM workers w
-- Held jobs are few (bounded by capacity) and the held set (job_held) holds exactly them.
LEFT JOIN LATERAL (SELECT count(*) AS n FROM job_held s WHERE s.worker_id = w.id) h ON true
WHERE w.project_id = %(project_id)s
  AND (%(before_id)s::bigint IS NULL OR w.id < %(before_id)s::bigint)
  AND (%(statuses)s::worker_status[] IS NULL OR w.status = ANY(%(statuses)s::worker_status[]))
ORDER BY w.id DESC
LIMIT %(limit)s

-- name: read_worker_get
-- One worker of a project with its in-flight count.
SELECT w.id, w.name, w.hostname, w.pid, w.queues, w.concurrency AS capacity, w.status,
       w.started_at, w.last_heartbeat_at, w.stopped_at,
       (SELECT count(*) FROM job_held s WHERE s.worker_id = w.id) AS in_flight,
       w.orphan_threads, w.loop_stalls, w.loop_stall, w.paused_at,
       w.paused_by
FROM workers w
WHERE w.project_id = %(project_id)s AND w.id = %(worker_id)s

-- name: read_worker_heartbeats
-- A worker's most recent heartbeats, newest first (worker_heartbeats_worker_idx order).
SELECT h.beat_at, h.in_flight, h.capacity
FROM worker_heartbeats h
JOIN workers w ON w.id = h.worker_id
WHERE w.project_id = %(project_id)s AND h.worker_id = %(worker_id)s
ORDER BY h.beat_at DESC
LIMIT %(limit)s

-- name: read_dlq_page
-- Dead letters of a project, newest first, keyset on id; filter by queue name and fingerprint.
-- explain: {"before_id": null, "queue": null, "fingerprint": null, "replayed": null, "limit": 51}
SELECT d.id, q.name AS queue, d.queue_id, d.job_id, d.handler, d.priority, d.reason, d.error,
       d.error_fingerprint, d.attempts, d.dead_lettered_at, d.replayed_at, d.replay_job_id
FROM dead_letter_jobs d
JOIN queues q ON q.id = d.queue_id
WHERE d.project_id = %(project_id)s
  AND (%(before_id)s::bigint IS NULL OR d.id < %(before_id)s::bigint)
  -- replayed: NULL = all, false = still waiting (what the overview counts), true = replayed.
  AND (%(replayed)s::boolean IS NULL OR (d.replayed_at IS NOT NULL) = %(replayed)s::boolean)
  AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
  AND (%(fingerprint)s::text IS NULL OR d.error_fingerprint = %(fingerprint)s::text)
ORDER BY d.id DESC
LIMIT %(limit)s

-- name: read_dlq_payloads
-- The payloads of a page of dead letters (the DLQ page's editors), by primary key.
-- explain: {"ids": [1, 2, 3]}
SELECT d.id, d.payload
FROM dead_letter_jobs d
WHERE d.project_id = %(project_id)s AND d.id = ANY(%(ids)s::bigint[])

-- name: read_dlq_get
-- One dead letter of a project (with its payload) and its queue name.
SELECT d.*, q.name AS queue
FROM dead_letter_jobs d
JOIN queues q ON q.id = d.queue_id
WHERE d.project_id = %(project_id)s AND d.id = %(dlq_id)s

-- name: read_schedules_page
-- Schedules of a project, keyset by id ascending, with their queue name.
-- explain: {"after_id": null, "limit": 51}
SELECT s.*, q.name AS queue
FROM scheduled_jobs s
JOIN queues q ON q.id = s.queue_id
WHERE s.project_id = %(project_id)s
  AND (%(after_id)s::bigint IS NULL OR s.id > %(after_id)s::bigint)
ORDER BY s.id
LIMIT %(limit)s

-- name: read_schedule_get
-- One schedule of a project with its queue name.
SELECT s.*, q.name AS queue
FROM scheduled_jobs s
JOIN queues q ON q.id = s.queue_id
WHERE s.project_id = %(project_id)s AND s.id = %(schedule_id)s

-- name: read_metrics_queues
-- Per-queue depth by state (claimable vs scheduled kept apart), in flight, live capacity.
-- explain: {}
WITH live AS (
    -- Waiting and scheduled (their status_group is their status): an index-only scan of
    -- jobs_project_group_idx, never the finished history.
    SELECT j.queue_id,
           count(*) FILTER (WHERE j.status_group = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE j.status_group = 'scheduled'
                             AND j.run_at <= coalesce(%(now)s, now())) AS scheduled_due,
           count(*) FILTER (WHERE j.status_group = 'waiting') AS waiting
    FROM jobs j
    WHERE j.project_id = %(project_id)s AND j.status_group IN ('waiting', 'scheduled')
    GROUP BY j.queue_id
), ready AS (
    -- Queued: the ready set holds exactly them (index-only, job_ready_N_claim_idx).
    SELECT r.queue_id, count(*) AS queued, min(r.run_at) AS oldest_queued_run_at
    FROM job_ready r
    JOIN queues q ON q.id = r.queue_id
    WHERE q.project_id = %(project_id)s
    GROUP BY r.queue_id
), held AS (
    -- Claimed and running: the held set, each job's status read by key (a scalar subquery:
    -- never a join the planner could make a scan of jobs; ::text, see job_complete_many).
    SELECT s.queue_id,
           count(*) FILTER (WHERE s.status = 'claimed') AS claimed,
           count(*) FILTER (WHERE s.status = 'running') AS running
    FROM (SELECT h.queue_id,
                 (SELECT j.status::text FROM jobs j WHERE j.id = h.job_id) AS status
          FROM job_held h
          JOIN queues q ON q.id = h.queue_id
          WHERE q.project_id = %(project_id)s) s
    GROUP BY s.queue_id
), letters AS (
    SELECT d.queue_id, count(*) AS dead_letters
    FROM dead_letter_jobs d
    WHERE d.project_id = %(project_id)s AND d.replayed_at IS NULL
    GROUP BY d.queue_id
)
SELECT q.id, q.name, q.is_paused, q.max_concurrency, q.priority,
       coalesce(r.queued, 0) AS queued,
       coalesce(l.scheduled, 0) AS scheduled,
       coalesce(l.scheduled_due, 0) AS scheduled_due,
       coalesce(l.waiting, 0) AS waiting,
       coalesce(h.claimed, 0) + coalesce(h.running, 0) AS in_flight,
       coalesce(h.running, 0) AS running,
       coalesce(d.dead_letters, 0) AS dead_letters,
       greatest(0, extract(epoch FROM coalesce(%(now)s, now()) - r.oldest_queued_run_at))::float8
           AS oldest_queued_age_s,
       -- Capacity a queue can draw on: active workers that listen to it (shared between queues).
       (SELECT coalesce(sum(w.concurrency), 0) FROM workers w
        WHERE w.project_id = q.project_id AND w.status = 'active'
          AND q.name = ANY(w.queues)) AS worker_capacity
FROM queues q
LEFT JOIN live l ON l.queue_id = q.id
LEFT JOIN ready r ON r.queue_id = q.id
LEFT JOIN held h ON h.queue_id = q.id
LEFT JOIN letters d ON d.queue_id = q.id
WHERE q.project_id = %(project_id)s
ORDER BY q.name

-- name: read_metrics_workers
-- Project totals: live workers, their capacity, and jobs in flight.
SELECT count(*) FILTER (WHERE w.status = 'active') AS active,
       count(*) FILTER (WHERE w.status = 'draining') AS draining,
       coalesce(sum(w.concurrency) FILTER (WHERE w.status = 'active'), 0) AS capacity,
       (SELECT count(*) FROM job_held s JOIN queues q ON q.id = s.queue_id
        WHERE q.project_id = %(project_id)s) AS in_flight
FROM workers w
WHERE w.project_id = %(project_id)s AND w.status IN ('active', 'draining')

-- name: read_prom_queues
-- Every queue of every project with its unfinished-job counts (the /metrics scrape).
-- explain: {}
WITH live AS (
    -- Waiting and scheduled, per project through jobs_project_group_idx (index-only): never
    -- the finished history.
    SELECT c.*
    FROM projects p
    CROSS JOIN LATERAL (
        SELECT j.queue_id,
               count(*) FILTER (WHERE j.status_group = 'scheduled') AS scheduled,
               count(*) FILTER (WHERE j.status_group = 'waiting') AS waiting
        FROM jobs j
        WHERE j.project_id = p.id AND j.status_group IN ('waiting', 'scheduled')
        GROUP BY j.queue_id
    ) c
), ready AS (
    -- Queued: the ready set holds exactly them.
    SELECT r.queue_id, count(*) AS queued, min(r.run_at) AS oldest_queued_run_at
    FROM job_ready r
    GROUP BY r.queue_id
), held AS (
    -- Claimed and running: the held set, each job's status read by key (as above).
    SELECT s.queue_id,
           count(*) FILTER (WHERE s.status = 'claimed') AS claimed,
           count(*) FILTER (WHERE s.status = 'running') AS running
    FROM (SELECT h.queue_id,
                 (SELECT j.status::text FROM jobs j WHERE j.id = h.job_id) AS status
          FROM job_held h) s
    GROUP BY s.queue_id
), letters AS (
    SELECT d.queue_id, count(*) AS n FROM dead_letter_jobs d
    WHERE d.replayed_at IS NULL GROUP BY d.queue_id
)
SELECT o.slug AS org, p.slug AS project, q.name AS queue, q.is_paused,
       coalesce(r.queued, 0) AS queued, coalesce(l.scheduled, 0) AS scheduled,
       coalesce(l.waiting, 0) AS waiting, coalesce(h.claimed, 0) AS claimed,
       coalesce(h.running, 0) AS running,
       coalesce(greatest(0, extract(epoch FROM coalesce(%(now)s, now()) - r.oldest_queued_run_at)),
                0)::float8 AS oldest_queued_age_s,
       coalesce(d.n, 0) AS dead_letters
FROM queues q
JOIN projects p ON p.id = q.project_id
JOIN organizations o ON o.id = p.org_id
LEFT JOIN live l ON l.queue_id = q.id
LEFT JOIN ready r ON r.queue_id = q.id
LEFT JOIN held h ON h.queue_id = q.id
LEFT JOIN letters d ON d.queue_id = q.id
ORDER BY o.slug, p.slug, q.name

-- name: read_prom_workers
-- Live workers per project and status, with their capacity and held jobs, the handler threads
-- that outlived their runs, how many report their event loop blocked now, how many are paused.
-- explain: {}
WITH held AS (
    SELECT s.worker_id, count(*) AS n FROM job_held s
    WHERE s.worker_id IS NOT NULL
    GROUP BY s.worker_id
)
SELECT o.slug AS org, p.slug AS project, w.status, count(*) AS workers,
       coalesce(sum(w.concurrency), 0) AS capacity,
       coalesce(sum(h.n), 0)::bigint AS in_flight,
       coalesce(sum(w.orphan_threads), 0)::bigint AS orphan_threads,
       count(*) FILTER (WHERE w.loop_stall @> '{"ongoing": true}') AS loop_blocked,
       count(*) FILTER (WHERE w.paused_at IS NOT NULL) AS paused
FROM workers w
JOIN projects p ON p.id = w.project_id
JOIN organizations o ON o.id = p.org_id
LEFT JOIN held h ON h.worker_id = w.id
WHERE w.status IN ('active', 'draining')
GROUP BY o.slug, p.slug, w.status
ORDER BY o.slug, p.slug, w.status
