-- The per-queue statistics rollup (scheduler loop `stats`) and its reads (charts, /metrics).
-- Each fold takes the next rows of one source table by id (the primary key: never a scan of
-- history), stops before the first row younger than the lag, adds them to the minute buckets
-- and the totals, and moves the watermark — in one statement. The watermark row is locked
-- FOR UPDATE SKIP LOCKED: a second scheduler replica folds nothing instead of folding twice.

-- name: stats_fold_executions
-- Fold up to `batch` finished runs into queue_stats (minute), queue_stats_hourly and
-- queue_stats_totals; returns the count. Histogram slots are counted with one FILTER each
-- (16 slots: domain/stats.py BOUNDS_MS has 15 bounds), never with a per-row function.
-- explain: {"batch": 1000, "lag_s": 2.0, "bounds": [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 1800000]}
WITH wm AS (
    SELECT w.last_id FROM stats_watermarks w WHERE w.source = 'executions'
    FOR UPDATE SKIP LOCKED
), batch AS MATERIALIZED (
    SELECT e.id, e.job_id, e.execution_seq, e.attempt, e.outcome, e.duration_ms, e.started_at,
           e.finished_at
    FROM wm, job_executions e
    WHERE e.id > wm.last_id
    ORDER BY e.id
    LIMIT %(batch)s
), cut AS (
    SELECT coalesce(min(b.id) FILTER (
               WHERE b.finished_at > coalesce(%(now)s, now()) - make_interval(secs => %(lag_s)s)),
               9223372036854775807) AS young,
           max(b.id) AS last
    FROM batch b
), taken AS MATERIALIZED (
    SELECT b.*, j.queue_id,
           date_trunc('minute', b.finished_at) AS bucket,
           -- A failed run of a job with attempts left was retried (the job went to scheduled).
           (b.outcome IN ('failed', 'timed_out') AND b.attempt < j.max_attempts
                AND j.status <> 'dead_letter') AS retried,
           -- Queue wait is known for a finished job's last run: run_at is that run's due time.
           CASE WHEN b.execution_seq = j.execution_seq
                     AND j.status IN ('done', 'dead_letter', 'cancelled')
                THEN greatest(0, extract(epoch FROM b.started_at - j.run_at) * 1000)::float8
           END AS wait_ms
    FROM batch b
    CROSS JOIN cut
    JOIN jobs j ON j.id = b.job_id
    WHERE b.id < cut.young
), slotted AS MATERIALIZED (
    -- Slot i holds values in (bound[i-1], bound[i]]: the number of bounds below the value.
    SELECT t.*,
           CASE WHEN t.duration_ms IS NOT NULL THEN
               (SELECT count(*) FROM unnest(%(bounds)s::float8[]) x WHERE x < t.duration_ms)::int
           END AS run_slot,
           CASE WHEN t.wait_ms IS NOT NULL THEN
               (SELECT count(*) FROM unnest(%(bounds)s::float8[]) x WHERE x < t.wait_ms)::int
           END AS wait_slot
    FROM taken t
), per AS MATERIALIZED (
    SELECT s.queue_id, s.bucket,
           count(*) FILTER (WHERE s.outcome = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE s.outcome = 'failed') AS failed,
           count(*) FILTER (WHERE s.outcome = 'timed_out') AS timed_out,
           count(*) FILTER (WHERE s.outcome = 'lease_lost') AS lease_lost,
           count(*) FILTER (WHERE s.outcome = 'released') AS released,
           count(*) FILTER (WHERE s.outcome = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE s.retried) AS retried,
           coalesce(sum(s.duration_ms), 0)::float8 AS run_sum_ms,
           count(s.run_slot) AS run_count,
           coalesce(sum(s.wait_ms), 0)::float8 AS wait_sum_ms,
           count(s.wait_slot) AS wait_count,
           count(*) FILTER (WHERE s.run_slot = 0) AS r0,
           count(*) FILTER (WHERE s.run_slot = 1) AS r1,
           count(*) FILTER (WHERE s.run_slot = 2) AS r2,
           count(*) FILTER (WHERE s.run_slot = 3) AS r3,
           count(*) FILTER (WHERE s.run_slot = 4) AS r4,
           count(*) FILTER (WHERE s.run_slot = 5) AS r5,
           count(*) FILTER (WHERE s.run_slot = 6) AS r6,
           count(*) FILTER (WHERE s.run_slot = 7) AS r7,
           count(*) FILTER (WHERE s.run_slot = 8) AS r8,
           count(*) FILTER (WHERE s.run_slot = 9) AS r9,
           count(*) FILTER (WHERE s.run_slot = 10) AS r10,
           count(*) FILTER (WHERE s.run_slot = 11) AS r11,
           count(*) FILTER (WHERE s.run_slot = 12) AS r12,
           count(*) FILTER (WHERE s.run_slot = 13) AS r13,
           count(*) FILTER (WHERE s.run_slot = 14) AS r14,
           count(*) FILTER (WHERE s.run_slot = 15) AS r15,
           count(*) FILTER (WHERE s.wait_slot = 0) AS w0,
           count(*) FILTER (WHERE s.wait_slot = 1) AS w1,
           count(*) FILTER (WHERE s.wait_slot = 2) AS w2,
           count(*) FILTER (WHERE s.wait_slot = 3) AS w3,
           count(*) FILTER (WHERE s.wait_slot = 4) AS w4,
           count(*) FILTER (WHERE s.wait_slot = 5) AS w5,
           count(*) FILTER (WHERE s.wait_slot = 6) AS w6,
           count(*) FILTER (WHERE s.wait_slot = 7) AS w7,
           count(*) FILTER (WHERE s.wait_slot = 8) AS w8,
           count(*) FILTER (WHERE s.wait_slot = 9) AS w9,
           count(*) FILTER (WHERE s.wait_slot = 10) AS w10,
           count(*) FILTER (WHERE s.wait_slot = 11) AS w11,
           count(*) FILTER (WHERE s.wait_slot = 12) AS w12,
           count(*) FILTER (WHERE s.wait_slot = 13) AS w13,
           count(*) FILTER (WHERE s.wait_slot = 14) AS w14,
           count(*) FILTER (WHERE s.wait_slot = 15) AS w15
    FROM slotted s
    WHERE EXISTS (SELECT 1 FROM queues q WHERE q.id = s.queue_id)  -- runs of a deleted queue
    GROUP BY s.queue_id, s.bucket
), buckets AS (
    INSERT INTO queue_stats AS qs (queue_id, bucket, succeeded, failed, timed_out, lease_lost,
                                   released, cancelled, retried, run_hist, run_sum_ms,
                                   wait_hist, wait_sum_ms)
    SELECT p.queue_id, p.bucket, p.succeeded, p.failed, p.timed_out, p.lease_lost, p.released,
           p.cancelled, p.retried,
           ARRAY[p.r0, p.r1, p.r2, p.r3, p.r4, p.r5, p.r6, p.r7, p.r8, p.r9, p.r10, p.r11, p.r12, p.r13, p.r14, p.r15]::bigint[],
           p.run_sum_ms,
           ARRAY[p.w0, p.w1, p.w2, p.w3, p.w4, p.w5, p.w6, p.w7, p.w8, p.w9, p.w10, p.w11, p.w12, p.w13, p.w14, p.w15]::bigint[],
           p.wait_sum_ms
    FROM per p
    ORDER BY p.queue_id, p.bucket
    ON CONFLICT (queue_id, bucket) DO UPDATE SET
        succeeded = qs.succeeded + EXCLUDED.succeeded,
        failed = qs.failed + EXCLUDED.failed,
        timed_out = qs.timed_out + EXCLUDED.timed_out,
        lease_lost = qs.lease_lost + EXCLUDED.lease_lost,
        released = qs.released + EXCLUDED.released,
        cancelled = qs.cancelled + EXCLUDED.cancelled,
        retried = qs.retried + EXCLUDED.retried,
        run_hist = int8_array_add(qs.run_hist, EXCLUDED.run_hist),
        run_sum_ms = qs.run_sum_ms + EXCLUDED.run_sum_ms,
        wait_hist = int8_array_add(qs.wait_hist, EXCLUDED.wait_hist),
        wait_sum_ms = qs.wait_sum_ms + EXCLUDED.wait_sum_ms
    RETURNING 1
), hours AS (
    INSERT INTO queue_stats_hourly AS qh (queue_id, bucket, succeeded, failed, timed_out,
                                          lease_lost, released, cancelled, retried, run_hist,
                                          run_sum_ms, wait_hist, wait_sum_ms)
    SELECT p.queue_id, date_trunc('hour', p.bucket), sum(p.succeeded), sum(p.failed),
           sum(p.timed_out), sum(p.lease_lost), sum(p.released), sum(p.cancelled),
           sum(p.retried),
           ARRAY[sum(p.r0), sum(p.r1), sum(p.r2), sum(p.r3), sum(p.r4), sum(p.r5), sum(p.r6), sum(p.r7), sum(p.r8), sum(p.r9), sum(p.r10), sum(p.r11), sum(p.r12), sum(p.r13), sum(p.r14), sum(p.r15)]::bigint[],
           sum(p.run_sum_ms),
           ARRAY[sum(p.w0), sum(p.w1), sum(p.w2), sum(p.w3), sum(p.w4), sum(p.w5), sum(p.w6), sum(p.w7), sum(p.w8), sum(p.w9), sum(p.w10), sum(p.w11), sum(p.w12), sum(p.w13), sum(p.w14), sum(p.w15)]::bigint[],
           sum(p.wait_sum_ms)
    FROM per p
    GROUP BY p.queue_id, date_trunc('hour', p.bucket)
    ORDER BY p.queue_id, date_trunc('hour', p.bucket)
    ON CONFLICT (queue_id, bucket) DO UPDATE SET
        succeeded = qh.succeeded + EXCLUDED.succeeded,
        failed = qh.failed + EXCLUDED.failed,
        timed_out = qh.timed_out + EXCLUDED.timed_out,
        lease_lost = qh.lease_lost + EXCLUDED.lease_lost,
        released = qh.released + EXCLUDED.released,
        cancelled = qh.cancelled + EXCLUDED.cancelled,
        retried = qh.retried + EXCLUDED.retried,
        run_hist = int8_array_add(qh.run_hist, EXCLUDED.run_hist),
        run_sum_ms = qh.run_sum_ms + EXCLUDED.run_sum_ms,
        wait_hist = int8_array_add(qh.wait_hist, EXCLUDED.wait_hist),
        wait_sum_ms = qh.wait_sum_ms + EXCLUDED.wait_sum_ms
    RETURNING 1
), totals AS (
    INSERT INTO queue_stats_totals AS t (queue_id, succeeded, failed, timed_out, lease_lost,
                                         released, cancelled, retried, run_hist, run_sum_ms,
                                         run_count, wait_hist, wait_sum_ms, wait_count)
    SELECT p.queue_id, sum(p.succeeded), sum(p.failed), sum(p.timed_out), sum(p.lease_lost),
           sum(p.released), sum(p.cancelled), sum(p.retried),
           ARRAY[sum(p.r0), sum(p.r1), sum(p.r2), sum(p.r3), sum(p.r4), sum(p.r5), sum(p.r6), sum(p.r7), sum(p.r8), sum(p.r9), sum(p.r10), sum(p.r11), sum(p.r12), sum(p.r13), sum(p.r14), sum(p.r15)]::bigint[],
           sum(p.run_sum_ms), sum(p.run_count),
           ARRAY[sum(p.w0), sum(p.w1), sum(p.w2), sum(p.w3), sum(p.w4), sum(p.w5), sum(p.w6), sum(p.w7), sum(p.w8), sum(p.w9), sum(p.w10), sum(p.w11), sum(p.w12), sum(p.w13), sum(p.w14), sum(p.w15)]::bigint[],
           sum(p.wait_sum_ms), sum(p.wait_count)
    FROM per p
    GROUP BY p.queue_id
    ORDER BY p.queue_id
    ON CONFLICT (queue_id) DO UPDATE SET
        succeeded = t.succeeded + EXCLUDED.succeeded,
        failed = t.failed + EXCLUDED.failed,
        timed_out = t.timed_out + EXCLUDED.timed_out,
        lease_lost = t.lease_lost + EXCLUDED.lease_lost,
        released = t.released + EXCLUDED.released,
        cancelled = t.cancelled + EXCLUDED.cancelled,
        retried = t.retried + EXCLUDED.retried,
        run_hist = int8_array_add(t.run_hist, EXCLUDED.run_hist),
        run_sum_ms = t.run_sum_ms + EXCLUDED.run_sum_ms,
        run_count = t.run_count + EXCLUDED.run_count,
        wait_hist = int8_array_add(t.wait_hist, EXCLUDED.wait_hist),
        wait_sum_ms = t.wait_sum_ms + EXCLUDED.wait_sum_ms,
        wait_count = t.wait_count + EXCLUDED.wait_count
    RETURNING t.queue_id
), moved AS (
    -- Up to the row before the first young one (or the whole batch when none is young).
    UPDATE stats_watermarks w
    SET last_id = CASE WHEN c.young < 9223372036854775807 THEN c.young - 1 ELSE c.last END,
        folded_at = now()
    FROM cut c
    WHERE w.source = 'executions' AND c.last IS NOT NULL
      AND (CASE WHEN c.young < 9223372036854775807 THEN c.young - 1 ELSE c.last END) > w.last_id
    RETURNING w.last_id
)
SELECT (SELECT count(*) FROM taken) AS folded,
       (SELECT count(*) FROM batch) AS seen,
       (SELECT coalesce(array_agg(queue_id), '{}') FROM totals) AS queue_ids,
       (SELECT count(*) FROM buckets) + (SELECT count(*) FROM hours) AS buckets,
       (SELECT count(*) FROM moved) AS moved

-- name: stats_fold_counts
-- Fold up to `batch` enqueued jobs (source 'jobs') or dead letters (source 'dead_letters').
-- explain: {"source": "jobs", "batch": 1000, "lag_s": 2.0}
WITH wm AS (
    SELECT w.last_id FROM stats_watermarks w WHERE w.source = %(source)s
    FOR UPDATE SKIP LOCKED
), batch AS MATERIALIZED (
    SELECT j.id, j.queue_id, j.created_at AS at FROM wm, jobs j
    WHERE %(source)s = 'jobs' AND j.id > wm.last_id
    ORDER BY j.id LIMIT %(batch)s
), dl AS MATERIALIZED (
    SELECT d.id, d.queue_id, d.dead_lettered_at AS at FROM wm, dead_letter_jobs d
    WHERE %(source)s = 'dead_letters' AND d.id > wm.last_id
    ORDER BY d.id LIMIT %(batch)s
), src AS (
    SELECT * FROM batch UNION ALL SELECT * FROM dl
), cut AS (
    SELECT coalesce(min(s.id) FILTER (
               WHERE s.at > coalesce(%(now)s, now()) - make_interval(secs => %(lag_s)s)),
               9223372036854775807) AS young,
           max(s.id) AS last
    FROM src s
), per AS (
    SELECT s.queue_id, date_trunc('minute', s.at) AS bucket, count(*) AS n
    FROM src s CROSS JOIN cut
    WHERE s.id < cut.young AND EXISTS (SELECT 1 FROM queues q WHERE q.id = s.queue_id)
    GROUP BY s.queue_id, date_trunc('minute', s.at)
), buckets AS (
    INSERT INTO queue_stats AS qs (queue_id, bucket, enqueued, dead_lettered)
    SELECT p.queue_id, p.bucket,
           CASE WHEN %(source)s = 'jobs' THEN p.n ELSE 0 END,
           CASE WHEN %(source)s = 'dead_letters' THEN p.n ELSE 0 END
    FROM per p ORDER BY p.queue_id, p.bucket
    ON CONFLICT (queue_id, bucket) DO UPDATE SET
        enqueued = qs.enqueued + EXCLUDED.enqueued,
        dead_lettered = qs.dead_lettered + EXCLUDED.dead_lettered
    RETURNING 1
), hours AS (
    INSERT INTO queue_stats_hourly AS qh (queue_id, bucket, enqueued, dead_lettered)
    SELECT p.queue_id, date_trunc('hour', p.bucket),
           CASE WHEN %(source)s = 'jobs' THEN sum(p.n) ELSE 0 END,
           CASE WHEN %(source)s = 'dead_letters' THEN sum(p.n) ELSE 0 END
    FROM per p GROUP BY p.queue_id, date_trunc('hour', p.bucket)
    ORDER BY p.queue_id, date_trunc('hour', p.bucket)
    ON CONFLICT (queue_id, bucket) DO UPDATE SET
        enqueued = qh.enqueued + EXCLUDED.enqueued,
        dead_lettered = qh.dead_lettered + EXCLUDED.dead_lettered
    RETURNING 1
), totals AS (
    INSERT INTO queue_stats_totals AS t (queue_id, enqueued, dead_lettered)
    SELECT p.queue_id,
           CASE WHEN %(source)s = 'jobs' THEN sum(p.n) ELSE 0 END,
           CASE WHEN %(source)s = 'dead_letters' THEN sum(p.n) ELSE 0 END
    FROM per p GROUP BY p.queue_id ORDER BY p.queue_id
    ON CONFLICT (queue_id) DO UPDATE SET
        enqueued = t.enqueued + EXCLUDED.enqueued,
        dead_lettered = t.dead_lettered + EXCLUDED.dead_lettered
    RETURNING t.queue_id
), moved AS (
    UPDATE stats_watermarks w
    SET last_id = CASE WHEN c.young < 9223372036854775807 THEN c.young - 1 ELSE c.last END,
        folded_at = now()
    FROM cut c
    WHERE w.source = %(source)s AND c.last IS NOT NULL
      AND (CASE WHEN c.young < 9223372036854775807 THEN c.young - 1 ELSE c.last END) > w.last_id
    RETURNING w.last_id
)
SELECT (SELECT coalesce(sum(n), 0) FROM per)::bigint AS folded,
       (SELECT count(*) FROM src) AS seen,
       (SELECT coalesce(array_agg(queue_id), '{}') FROM totals) AS queue_ids,
       (SELECT count(*) FROM buckets) + (SELECT count(*) FROM hours) AS buckets,
       (SELECT count(*) FROM moved) AS moved

-- name: stats_prune
-- Delete minute and hour buckets older than the retention (bounded batches, oldest first).
WITH minutes AS (
    DELETE FROM queue_stats s
    WHERE (s.queue_id, s.bucket) IN (
        SELECT x.queue_id, x.bucket FROM queue_stats x
        WHERE x.bucket < coalesce(%(now)s, now()) - make_interval(days => %(days)s)
        ORDER BY x.bucket LIMIT %(batch)s)
    RETURNING 1
), hours AS (
    DELETE FROM queue_stats_hourly s
    WHERE (s.queue_id, s.bucket) IN (
        SELECT x.queue_id, x.bucket FROM queue_stats_hourly x
        WHERE x.bucket < coalesce(%(now)s, now()) - make_interval(days => %(days)s)
        ORDER BY x.bucket LIMIT %(batch)s)
    RETURNING 1
)
SELECT (SELECT count(*) FROM minutes) + (SELECT count(*) FROM hours) AS n

-- name: stats_notify
-- Tell dashboards (the API's one listener) which queues got new statistics.
SELECT pg_notify('jobyard_events', 'stats:' || array_to_string(%(queue_ids)s::bigint[], ','))

-- name: stats_series
-- One row per chart step `t` of a window (every step present, zeros included), the buckets of
-- one project (or one queue) added up in SQL: minute buckets when `hourly` is false, hour
-- buckets otherwise (a 7-day chart reads at most 168 rows per queue). Histograms are summed slot
-- by slot (16 plain sums, no per-row function); empty slots read as NULL, which core.stats pads.
-- A bucket before the first step (the window's partial edge) matches no step and is left out.
-- explain: {"queue_id": null, "range_s": 604800, "step_s": 7200, "hourly": true}
WITH steps AS (
    SELECT generate_series(
        date_bin(make_interval(secs => %(step_s)s),
                 coalesce(%(now)s, now()) - make_interval(secs => %(range_s)s),
                 timestamptz '2000-01-01') + make_interval(secs => %(step_s)s),
        date_bin(make_interval(secs => %(step_s)s), coalesce(%(now)s, now()),
                 timestamptz '2000-01-01'),
        make_interval(secs => %(step_s)s)) AS t
), src AS (
    SELECT s.bucket, s.succeeded, s.failed + s.timed_out AS failed, s.enqueued,
           s.dead_lettered, s.run_hist, s.wait_hist, s.timed_out, s.lease_lost, s.released,
           s.cancelled
    FROM queue_stats s
    JOIN queues q ON q.id = s.queue_id
    WHERE NOT %(hourly)s AND q.project_id = %(project_id)s
      AND (%(queue_id)s::bigint IS NULL OR s.queue_id = %(queue_id)s::bigint)
      AND s.bucket > coalesce(%(now)s, now()) - make_interval(secs => %(range_s)s + %(step_s)s)
    UNION ALL
    SELECT s.bucket, s.succeeded, s.failed + s.timed_out, s.enqueued, s.dead_lettered,
           s.run_hist, s.wait_hist, s.timed_out, s.lease_lost, s.released, s.cancelled
    FROM queue_stats_hourly s
    JOIN queues q ON q.id = s.queue_id
    WHERE %(hourly)s AND q.project_id = %(project_id)s
      AND (%(queue_id)s::bigint IS NULL OR s.queue_id = %(queue_id)s::bigint)
      AND s.bucket > coalesce(%(now)s, now()) - make_interval(secs => %(range_s)s + %(step_s)s)
)
SELECT st.t,
       coalesce(sum(s.succeeded), 0)::bigint AS succeeded,
       coalesce(sum(s.failed), 0)::bigint AS failed,
       coalesce(sum(s.enqueued), 0)::bigint AS enqueued,
       coalesce(sum(s.dead_lettered), 0)::bigint AS dead_lettered,
       coalesce(sum(s.timed_out), 0)::bigint AS timed_out,
       coalesce(sum(s.lease_lost), 0)::bigint AS lease_lost,
       coalesce(sum(s.released), 0)::bigint AS released,
       coalesce(sum(s.cancelled), 0)::bigint AS cancelled,
       ARRAY[sum(s.run_hist[1]), sum(s.run_hist[2]), sum(s.run_hist[3]), sum(s.run_hist[4]),
             sum(s.run_hist[5]), sum(s.run_hist[6]), sum(s.run_hist[7]),
             sum(s.run_hist[8]), sum(s.run_hist[9]), sum(s.run_hist[10]),
             sum(s.run_hist[11]), sum(s.run_hist[12]), sum(s.run_hist[13]),
             sum(s.run_hist[14]), sum(s.run_hist[15]), sum(s.run_hist[16])]::bigint[] AS run_hist,
       ARRAY[sum(s.wait_hist[1]), sum(s.wait_hist[2]), sum(s.wait_hist[3]), sum(s.wait_hist[4]),
             sum(s.wait_hist[5]), sum(s.wait_hist[6]), sum(s.wait_hist[7]),
             sum(s.wait_hist[8]), sum(s.wait_hist[9]), sum(s.wait_hist[10]),
             sum(s.wait_hist[11]), sum(s.wait_hist[12]), sum(s.wait_hist[13]),
             sum(s.wait_hist[14]), sum(s.wait_hist[15]), sum(s.wait_hist[16])]::bigint[] AS wait_hist
FROM steps st
LEFT JOIN src s
       ON date_bin(make_interval(secs => %(step_s)s), s.bucket, timestamptz '2000-01-01') = st.t
GROUP BY st.t
ORDER BY st.t

-- name: stats_totals_all
-- Every queue's counters since creation, with org/project/queue names (the /metrics scrape).
-- explain: {}
SELECT o.slug AS org, p.slug AS project, q.name AS queue, t.*
FROM queue_stats_totals t
JOIN queues q ON q.id = t.queue_id
JOIN projects p ON p.id = q.project_id
JOIN organizations o ON o.id = p.org_id
ORDER BY o.slug, p.slug, q.name

-- name: stats_watermarks_all
-- How far each source has been folded, and when (the rollup's lag, shown on /metrics).
SELECT w.source, w.last_id, w.folded_at FROM stats_watermarks w ORDER BY w.source

-- name: live_listen
-- The API's one dashboard listener: wake-ups (enqueue, promotion, requeue, replay), cancel
-- requests, and dashboard events (stats folded, queue paused, job cancelled).
LISTEN jobyard_jobs; LISTEN jobyard_cancel; LISTEN jobyard_events

-- name: live_notify
-- Tell the dashboards' listeners something changed (payload "kind:queue_id[:job_id]").
SELECT pg_notify('jobyard_events', %(payload)s)

-- name: live_listeners
-- Sessions of this database that LISTEN for dashboard events (one per API process).
SELECT count(*) AS n FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND position('LISTEN jobyard_events' IN query) > 0
