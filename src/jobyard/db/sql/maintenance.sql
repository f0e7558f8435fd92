-- name: job_promote_due
-- Move up to `batch` due scheduled jobs (delayed enqueues, retries) to queued; NOTIFY each
-- queue once. Racing promoters skip each other's rows, so each job is promoted once. With
-- `since`, only jobs due at or after it are looked at (the promoter's position: under a held
-- xmin horizon jobs_due_idx keeps a dead entry for every job promoted since the hold began,
-- which a scan from the start walks on every pass; docs/DATABASE.md); NULL looks at all.
-- explain: {"batch": 1000, "now": null, "since": null}
WITH due AS MATERIALIZED (
    -- jobs_due_idx (run_at) WHERE status_group = 'scheduled' supplies this order: no sort,
    -- and the lower bound is an index condition, so the scan starts at the position.
    SELECT j.id
    FROM jobs j
    WHERE j.status_group = 'scheduled' AND j.run_at <= coalesce(%(now)s, now())
      AND j.run_at >= coalesce(%(since)s::timestamptz, '-infinity')
    ORDER BY j.run_at
    LIMIT %(batch)s
    FOR UPDATE OF j SKIP LOCKED
), promoted AS (
    UPDATE jobs j
    SET status = 'queued', updated_at = coalesce(%(now)s, now())
    -- = ANY(ARRAY(...)): a primary-key lookup whatever the planner estimates for `due`, and
    -- so is status::text: written plainly, a status test matched the due index's
    -- predicate and the generic plan walked that index whole (every dead entry of a held
    -- horizon) instead of the key. Compare-and-set: only a job still scheduled is promoted (a
    -- cancel may have won).
    WHERE j.id = ANY (ARRAY(SELECT id FROM due)) AND j.status::text = 'scheduled'
    RETURNING j.queue_id
), per_queue AS MATERIALIZED (
    -- MATERIALIZED with a volatile call: pg_notify runs once per promoted queue.
    SELECT p.queue_id, count(*) AS promoted, pg_notify('jobyard_jobs', p.queue_id::text) AS sent
    FROM promoted p
    GROUP BY p.queue_id
)
SELECT queue_id, promoted FROM per_queue

-- name: lease_reap
-- Take back held jobs whose lease expired (more than grace_s ago) or whose worker is in
-- worker_ids (declared dead): requeue with the attempt refunded, dead-letter a poison pill, or
-- finish as cancelled a job whose cancel was requested (nobody is left to deliver it).
-- One statement per batch; a heartbeat or completion that locks the row first wins. With
-- `since`, only leases that expired at or after it are taken (the reaper's position); NULL
-- takes all. Candidates come from the held set, job_held (migration 0029): its dead rows go
-- with each rotation, so a held xmin horizon cannot make this walk grow (docs/DATABASE.md).
-- explain: {"batch": 500, "grace_s": 0.0, "worker_ids": [], "poison_threshold": 3, "suspect_delay_s": 10.0, "now": null, "since": null}
WITH expired AS MATERIALIZED (
    -- SKIP LOCKED: a row a heartbeat/complete is writing is left alone this pass. Under READ
    -- COMMITTED, FOR UPDATE re-evaluates this WHERE on the newest row version once locked, so
    -- a lease extended after our snapshot is not taken.
    -- The run's attempt, worker and start are read here, on the locked row, because the
    -- UPDATE below clears them and the run's job_executions row is written after it.
    SELECT j.id, j.worker_id, j.execution_seq, j.attempt, j.solo_deaths,
           coalesce(j.started_at, j.claimed_at) AS started_at,
           -- Poison-pill attribution: a death is pinned on this job only when its worker held
           -- nothing else (no other held job, no other run lost with it, even one reaped in an
           -- earlier pass because its lease ran out first). Anyone else who shared the worker
           -- becomes a suspect instead, which the claim runs alone next time (docs/WORKER.md).
           (NOT EXISTS (SELECT 1 FROM job_held o
                        WHERE o.worker_id = j.worker_id AND o.job_id <> j.id)
            AND NOT EXISTS (SELECT 1 FROM job_executions e
                            WHERE e.worker_id = j.worker_id AND e.job_id <> j.id
                              AND e.outcome = 'lease_lost')) AS alone,
           (j.cancel_requested_at IS NULL) AS not_cancelled,
           (j.cancel_requested_at IS NOT NULL) AS cancelled,
           (j.worker_id = ANY(%(worker_ids)s::bigint[])) AS worker_dead
    FROM jobs j
    -- Candidates by key: the held set's jobs (bounded by the workers' capacity) whose lease
    -- expired, each read by key, and the dead workers' held jobs by job_held_worker_idx.
    WHERE j.id = ANY (ARRAY(
              SELECT c.job_id
              FROM (
                  -- A scalar subquery, not a join: a freshly truncated partition has no
                  -- statistics, and a join could be planned as a scan of all of jobs.
                  -- OFFSET 0 keeps it one lookup a row.
                  SELECT h.job_id,
                         (SELECT x.lock_expires_at FROM jobs x WHERE x.id = h.job_id) AS lease
                  FROM job_held h
                  OFFSET 0
              ) c
              WHERE c.lease < coalesce(%(now)s, now()) - make_interval(secs => %(grace_s)s)
                AND c.lease >= coalesce(%(since)s::timestamptz, '-infinity')
              UNION ALL
              SELECT d.job_id FROM job_held d
              WHERE d.worker_id = ANY(%(worker_ids)s::bigint[])))
      -- Re-checked on the locked row (READ COMMITTED re-evaluates it on the newest version).
      AND j.status::text IN ('claimed', 'running')
      AND (j.lock_expires_at < coalesce(%(now)s, now()) - make_interval(secs => %(grace_s)s)
           OR j.worker_id = ANY(%(worker_ids)s::bigint[]))
    LIMIT %(batch)s
    FOR UPDATE OF j SKIP LOCKED
), judged AS MATERIALIZED (
    SELECT x.*, x.solo_deaths + (x.alone)::int AS deaths,
           (x.alone AND x.solo_deaths + 1 >= %(poison_threshold)s AND x.not_cancelled) AS poison
    FROM expired x
), reaped AS (
    UPDATE jobs j
    SET status = CASE WHEN x.cancelled THEN 'cancelled'::job_status
                      WHEN x.poison THEN 'dead_letter'::job_status
                      WHEN x.alone AND %(suspect_delay_s)s > 0 THEN 'scheduled'::job_status
                      ELSE 'queued'::job_status END,
        -- After a death pinned on it, a job waits suspect_delay_s before its next (solo) run:
        -- a crash loop through every worker would otherwise leave no worker for other work
        -- (the promoter queues it when due). Jobs that only shared a death go back at once.
        run_at = CASE WHEN x.alone AND NOT x.poison AND NOT x.cancelled
                           AND %(suspect_delay_s)s > 0
                      THEN coalesce(%(now)s, now()) + make_interval(secs => %(suspect_delay_s)s)
                      ELSE j.run_at END,
        -- Refund: the run died with its worker, the job did not fail. A poison pill keeps it.
        attempt = CASE WHEN x.poison THEN j.attempt ELSE greatest(0, j.attempt - 1) END,
        lease_lost_count = j.lease_lost_count + 1,
        solo_deaths = x.deaths,
        -- Requeued after a death: run it alone next time (cleared when a run ends normally).
        suspect = NOT x.poison AND NOT x.cancelled,
        worker_id = NULL, lock_expires_at = NULL, claimed_at = NULL, started_at = NULL,
        finished_at = CASE WHEN x.poison OR x.cancelled THEN coalesce(%(now)s, now()) END,
        last_error = CASE WHEN x.poison
            THEN format('worker died %%s %%s while running this job alone', x.deaths,
                        CASE WHEN x.deaths = 1 THEN 'time' ELSE 'times' END)
            ELSE j.last_error END,
        error_fingerprint = CASE WHEN x.poison
            THEN md5(format('worker died %%s %%s while running this job alone', x.deaths,
                        CASE WHEN x.deaths = 1 THEN 'time' ELSE 'times' END))
            ELSE j.error_fingerprint END,
        updated_at = coalesce(%(now)s, now())
    FROM judged x
    -- Re-check on the locked row (belt and braces with the FOR UPDATE re-evaluation above).
    -- The ANY(ARRAY(...)) keeps the jobs side a primary-key lookup, and so does status::text
    -- (written plainly, a status test can match a partial index's predicate).
    WHERE j.id = ANY (ARRAY(SELECT id FROM judged)) AND j.id = x.id
      AND j.status::text IN ('claimed', 'running')
      AND j.execution_seq = x.execution_seq
      AND (j.lock_expires_at < coalesce(%(now)s, now()) - make_interval(secs => %(grace_s)s)
           OR j.worker_id = ANY(%(worker_ids)s::bigint[]))
    RETURNING j.id, j.project_id, j.queue_id, j.handler, j.payload, j.priority, j.status,
              j.attempt, j.execution_seq, j.last_error, j.error_fingerprint,
              x.worker_id AS lost_worker_id, x.attempt AS run_attempt,
              x.started_at AS run_started_at, x.poison, x.cancelled, x.worker_dead
), recorded AS (
    -- The lost run's one row; its attempt is the one the run was charged (before the refund).
    INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome,
                                attempt_charged, started_at, finished_at, duration_ms, error)
    SELECT r.id, r.execution_seq, r.run_attempt, r.lost_worker_id, 'lease_lost', r.poison,
           r.run_started_at, coalesce(%(now)s, now()),
           greatest(0, (extract(epoch FROM coalesce(%(now)s, now()) - r.run_started_at) * 1000)::int),
           CASE WHEN r.worker_dead THEN 'worker declared dead (no heartbeat)'
                ELSE 'lease expired (no heartbeat)' END
    FROM reaped r
), lettered AS (
    INSERT INTO dead_letter_jobs (project_id, queue_id, job_id, handler, payload, priority, reason,
                                  error, error_fingerprint, attempts, dead_lettered_at)
    SELECT r.project_id, r.queue_id, r.id, r.handler, r.payload, r.priority, 'poison_pill',
           r.last_error, r.error_fingerprint, r.attempt, coalesce(%(now)s, now())
    FROM reaped r
    WHERE r.poison
), notified AS MATERIALIZED (
    -- One NOTIFY per queue that got jobs back.
    SELECT d.queue_id, pg_notify('jobyard_jobs', d.queue_id::text) AS sent
    FROM (SELECT DISTINCT queue_id FROM reaped WHERE status = 'queued') d
)
SELECT r.id AS job_id, r.queue_id, r.status::text AS status, r.lost_worker_id AS worker_id,
       r.execution_seq, r.worker_dead, (SELECT count(*) FROM notified) AS queues_notified
FROM reaped r

-- name: worker_sweep_dead
-- Mark up to `batch` workers silent for longer than sweep_after_s as dead; returns their ids.
-- explain: {"batch": 100, "sweep_after_s": 90.0, "now": null}
WITH stale AS MATERIALIZED (
    -- workers_live_heartbeat_idx (last_heartbeat_at) WHERE status IN ('active', 'draining').
    SELECT w.id
    FROM workers w
    WHERE w.status IN ('active', 'draining')
      AND w.last_heartbeat_at < coalesce(%(now)s, now()) - make_interval(secs => %(sweep_after_s)s)
    ORDER BY w.last_heartbeat_at
    LIMIT %(batch)s
    FOR UPDATE OF w SKIP LOCKED
)
UPDATE workers w
SET status = 'dead', stopped_at = coalesce(%(now)s, now())
-- Re-check on the locked row: a heartbeat that got there first keeps the worker alive.
WHERE w.id = ANY (ARRAY(SELECT id FROM stale))
  AND w.status IN ('active', 'draining')
  AND w.last_heartbeat_at < coalesce(%(now)s, now()) - make_interval(secs => %(sweep_after_s)s)
RETURNING w.id, w.last_heartbeat_at

-- name: retention_delete_jobs
-- Delete up to `batch` terminal jobs finished more than age_s ago (executions and logs cascade;
-- dead_letter_jobs rows stay, their job_id is nulled).
-- explain: {"batch": 5000, "age_s": 604800.0, "now": null}
WITH doomed AS MATERIALIZED (
    -- jobs_finished_idx (finished_at) bounds the scan; LIMIT bounds the statement.
    SELECT j.id
    FROM jobs j
    WHERE j.finished_at < coalesce(%(now)s, now()) - make_interval(secs => %(age_s)s)
      AND j.status IN ('done', 'dead_letter', 'cancelled')
    ORDER BY j.finished_at
    LIMIT %(batch)s
    FOR UPDATE OF j SKIP LOCKED
)
DELETE FROM jobs WHERE id = ANY (ARRAY(SELECT id FROM doomed))

-- name: retention_delete_heartbeats
-- Delete up to `batch` worker heartbeats older than age_s.
-- explain: {"batch": 5000, "age_s": 86400.0, "now": null}
WITH doomed AS MATERIALIZED (
    SELECT h.id
    FROM worker_heartbeats h
    WHERE h.beat_at < coalesce(%(now)s, now()) - make_interval(secs => %(age_s)s)
    ORDER BY h.beat_at
    LIMIT %(batch)s
    FOR UPDATE OF h SKIP LOCKED
)
DELETE FROM worker_heartbeats WHERE id = ANY (ARRAY(SELECT id FROM doomed))

-- name: retention_delete_refresh_tokens
-- Delete up to `batch` refresh tokens that expired more than age_s ago (useless to anyone).
-- explain: {"batch": 5000, "age_s": 0.0, "now": null}
WITH doomed AS MATERIALIZED (
    SELECT t.id
    FROM refresh_tokens t
    WHERE t.expires_at < coalesce(%(now)s, now()) - make_interval(secs => %(age_s)s)
    ORDER BY t.expires_at
    LIMIT %(batch)s
    FOR UPDATE OF t SKIP LOCKED
)
DELETE FROM refresh_tokens WHERE id = ANY (ARRAY(SELECT id FROM doomed))

-- name: retention_delete_rate_limits
-- Delete up to `batch` rate-limit counters whose window started more than age_s ago.
-- explain: {"batch": 5000, "age_s": 86400.0, "now": null}
WITH doomed AS MATERIALIZED (
    SELECT c.bucket, c.window_start
    FROM rate_limit_counters c
    WHERE c.window_start < coalesce(%(now)s, now()) - make_interval(secs => %(age_s)s)
    ORDER BY c.window_start
    LIMIT %(batch)s
    FOR UPDATE OF c SKIP LOCKED
)
DELETE FROM rate_limit_counters c USING doomed d
WHERE c.bucket = d.bucket AND c.window_start = d.window_start

-- name: retention_delete_workers
-- Delete up to `batch` workers stopped or declared dead more than age_s ago that hold no job.
-- Their heartbeats cascade; their jobs' and runs' worker_id is nulled (workers_null_refs()),
-- found through what they held, ran and were written into (job_held, job_executions_worker_idx,
-- job_worker_refs). Older than the jobs' retention by default, so most of what they ran is
-- gone already and the nulling stays small.
-- explain: {"batch": 100, "age_s": 1209600.0, "now": null}
WITH doomed AS MATERIALIZED (
    -- workers_gone_idx (stopped_at) WHERE status IN ('stopped', 'dead').
    SELECT w.id
    FROM workers w
    WHERE w.status IN ('stopped', 'dead')
      AND w.stopped_at < coalesce(%(now)s, now()) - make_interval(secs => %(age_s)s)
      -- A dead worker's jobs wait for the reaper, which records the run with its worker.
      AND NOT EXISTS (SELECT 1 FROM job_held h WHERE h.worker_id = w.id)
    ORDER BY w.stopped_at
    LIMIT %(batch)s
    FOR UPDATE OF w SKIP LOCKED
)
DELETE FROM workers WHERE id = ANY (ARRAY(SELECT id FROM doomed))

-- name: retention_delete_batches
-- Delete up to `batch` job batches created more than age_s ago none of whose jobs is left
-- (jobs_batch_idx answers that); a batch with any job, finished or not, stays.
-- explain: {"batch": 5000, "age_s": 604800.0, "now": null}
WITH doomed AS MATERIALIZED (
    SELECT b.id
    FROM job_batches b
    WHERE b.created_at < coalesce(%(now)s, now()) - make_interval(secs => %(age_s)s)
      AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.batch_id = b.id)
    ORDER BY b.id
    LIMIT %(batch)s
    -- An insert into the batch holds it FOR KEY SHARE (jobs_batch_ref_check): skipped here.
    FOR UPDATE OF b SKIP LOCKED
)
DELETE FROM job_batches WHERE id = ANY (ARRAY(SELECT id FROM doomed))
