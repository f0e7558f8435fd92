-- The dashboard benchmark's data set (jobyard bench-dashboard), built with set-based SQL: one
-- statement per table, no row-by-row inserts. Job g (1..n) gets bucket b = (g-1) % 1000:
-- b < 900 done, < 930 dead-lettered, < 950 cancelled (the terminal 95 %, which own every run),
-- < 980 queued, < 990 scheduled, < 995 waiting, else running (held by a live worker). Created
-- and finished times spread evenly over the last 7 days, ids in time order.

-- name: dash_queues
-- Extra queues for the benchmark project (the demo seed made default, critical, reports).
INSERT INTO queues (project_id, name)
SELECT %(project_id)s, unnest(%(names)s::text[])
ON CONFLICT DO NOTHING

-- name: dash_workers
-- Live and dead workers serving the project's queues, round-robin.
WITH qs AS (SELECT array_agg(name ORDER BY id) AS names FROM queues
            WHERE project_id = %(project_id)s)
INSERT INTO workers (project_id, name, hostname, pid, queues, concurrency, status, started_at,
                     last_heartbeat_at, stopped_at)
SELECT %(project_id)s, 'worker-' || w, 'host-' || (w %% 4), 1000 + w,
       ARRAY[qs.names[1 + w %% cardinality(qs.names)],
             qs.names[1 + (w + 1) %% cardinality(qs.names)]],
       400,
       CASE WHEN w <= %(live)s THEN 'active' ELSE 'dead' END::worker_status,
       now() - make_interval(hours => w),
       CASE WHEN w <= %(live)s THEN now() ELSE now() - interval '30 minutes' END,
       CASE WHEN w <= %(live)s THEN NULL ELSE now() - interval '30 minutes' END
FROM generate_series(1, %(workers)s) w, qs
RETURNING id

-- name: dash_jobs
-- n jobs in one statement; returns the first id (ids are consecutive, in g order).
WITH qs AS (
    SELECT array_agg(id ORDER BY id) AS ids FROM queues WHERE project_id = %(project_id)s
), ws AS (
    SELECT array_agg(id ORDER BY id) AS ids FROM workers
    WHERE project_id = %(project_id)s AND status = 'active'
), spec AS (
    SELECT g, (g - 1) %% 1000 AS b,
           -- ordinal among terminal jobs (they own the runs), and how many runs this one has
           ((g - 1) / 1000) * 950 + (g - 1) %% 1000 AS k,
           now() - interval '7 days' + (interval '7 days' - interval '10 minutes') * g / %(n)s AS t
    FROM generate_series(1, %(n)s) g
), made AS (
    INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at, attempt,
                      max_attempts, execution_seq, worker_id, lock_expires_at, claimed_at,
                      started_at, finished_at, last_error, error_fingerprint, created_at,
                      updated_at)
    SELECT %(project_id)s,
           qs.ids[1 + s.g %% cardinality(qs.ids)],
           (ARRAY['send_email', 'resize_image', 'charge_card', 'sync_crm', 'render_pdf',
                  'webhook', 'export_csv', 'reindex', 'notify', 'cleanup', 'import', 'score'])
               [1 + s.g %% 12],
           jsonb_build_object('n', s.g),
           CASE WHEN s.b < 900 THEN 'done' WHEN s.b < 930 THEN 'dead_letter'
                WHEN s.b < 950 THEN 'cancelled' WHEN s.b < 980 THEN 'queued'
                WHEN s.b < 990 THEN 'scheduled' WHEN s.b < 995 THEN 'waiting'
                ELSE 'running' END::job_status,
           (s.g %% 3) - 1,
           CASE WHEN s.b BETWEEN 980 AND 989 THEN now() + make_interval(mins => s.g %% 600)
                ELSE s.t END,
           CASE WHEN s.b < 950 THEN 2 + (s.k < %(extra)s)::int WHEN s.b >= 995 THEN 1 ELSE 0 END,
           5,
           CASE WHEN s.b < 950 THEN 2 + (s.k < %(extra)s)::int WHEN s.b >= 995 THEN 1 ELSE 0 END,
           CASE WHEN s.b >= 995 THEN ws.ids[1 + s.g %% cardinality(ws.ids)] END,
           CASE WHEN s.b >= 995 THEN now() + interval '30 seconds' END,
           CASE WHEN s.b >= 995 THEN now() - interval '5 seconds' END,
           CASE WHEN s.b >= 995 THEN now() - interval '5 seconds' END,
           CASE WHEN s.b < 950 THEN s.t + interval '5 minutes' END,
           CASE WHEN s.b BETWEEN 900 AND 929 THEN 'TimeoutError: upstream ' || (s.g %% 7) END,
           CASE WHEN s.b BETWEEN 900 AND 929 THEN md5('fp' || (s.g %% 7)) END,
           s.t, s.t
    FROM spec s, qs, ws
    ORDER BY s.g
    RETURNING id
)
SELECT min(id) AS first_id, count(*) AS n FROM made

-- name: dash_executions
-- e runs over the terminal jobs: run e belongs to terminal ordinal k = (e-1) mod T, seq (e-1) / T
-- + 1; the job's last run carries its outcome, earlier ones failed.
WITH spec AS (
    SELECT e, (e - 1) %% %(terminal)s AS k, (e - 1) / %(terminal)s + 1 AS seq
    FROM generate_series(1::bigint, %(n)s) e
), runs AS (
    SELECT s.*, (s.k / 950) * 1000 + s.k %% 950 + 1 AS g,
           2 + (s.k < %(extra)s)::int AS runs
    FROM spec s
), placed AS (
    SELECT r.*, (r.g - 1) %% 1000 AS b,
           now() - interval '7 days' + (interval '7 days' - interval '10 minutes') * r.g / %(jobs)s
               + interval '5 minutes' - (r.runs - r.seq) * interval '1 minute' AS done_at,
           5 + (r.e * 7919) %% 1500 AS ms
    FROM runs r
)
INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome, started_at,
                            finished_at, duration_ms, error, error_fingerprint)
SELECT %(first_id)s + p.g - 1, p.seq, p.seq, %(worker_id)s,
       CASE WHEN p.seq < p.runs THEN 'failed'
            WHEN p.b < 900 THEN 'succeeded' WHEN p.b < 930 THEN 'failed'
            ELSE 'cancelled' END::execution_outcome,
       p.done_at - make_interval(secs => p.ms / 1000.0), p.done_at, p.ms,
       CASE WHEN p.seq < p.runs OR p.b BETWEEN 900 AND 929
            THEN 'TimeoutError: upstream ' || (p.g %% 7) END,
       CASE WHEN p.seq < p.runs OR p.b BETWEEN 900 AND 929 THEN md5('fp' || (p.g %% 7)) END
FROM placed p
ORDER BY p.done_at, p.e

-- name: dash_dead_letters
-- A dead letter for every dead-lettered job.
INSERT INTO dead_letter_jobs (project_id, queue_id, job_id, handler, payload, priority, reason,
                              error, error_fingerprint, attempts, dead_lettered_at)
SELECT j.project_id, j.queue_id, j.id, j.handler, j.payload, j.priority, 'exhausted',
       j.last_error, j.error_fingerprint, j.attempt, j.finished_at
FROM jobs j
WHERE j.project_id = %(project_id)s AND j.status = 'dead_letter'
ORDER BY j.finished_at

-- name: dash_logs
-- Two log lines for each of the first `n` terminal jobs' last run.
INSERT INTO job_logs (job_id, execution_seq, level, message, fields, created_at)
SELECT j.id, j.execution_seq, lv.level, lv.message, jsonb_build_object('step', lv.step),
       j.finished_at
FROM (SELECT id, execution_seq, finished_at FROM jobs
      WHERE project_id = %(project_id)s AND finished_at IS NOT NULL
      ORDER BY id DESC LIMIT %(n)s) j
CROSS JOIN (VALUES ('info', 'started', 1), ('info', 'finished', 2)) AS lv(level, message, step)

-- name: dash_counts
-- What was built.
SELECT (SELECT count(*) FROM jobs WHERE project_id = %(project_id)s) AS jobs,
       (SELECT count(*) FROM job_executions) AS executions,
       (SELECT count(*) FROM dead_letter_jobs WHERE project_id = %(project_id)s) AS dead_letters,
       (SELECT count(*) FROM job_logs) AS logs

-- name: dash_vacuum
-- Visibility map and statistics for the new rows (what autovacuum would reach in time).
VACUUM (ANALYZE) jobs, job_executions, dead_letter_jobs, job_logs, workers, queue_stats
