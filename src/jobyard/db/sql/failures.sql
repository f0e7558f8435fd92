-- name: failure_groups
-- Failing jobs (failed, dead-lettered, or scheduled again after an error) grouped by error fingerprint across queues: count, first and last seen, handlers and queues touched, the newest sample.
-- explain: {"fingerprint": null, "limit": 100}
WITH failing AS (
    -- handler as text: an array of a domain (job_handler[], migration 0026) reaches the client
    -- as a string, since drivers know the base types' arrays only.
    SELECT j.id, j.error_fingerprint, j.handler::text AS handler, j.queue_id, j.status,
           j.last_error,
           coalesce(j.finished_at, j.updated_at) AS seen_at
    FROM jobs j
    WHERE j.project_id = %(project_id)s AND j.error_fingerprint IS NOT NULL
      AND (j.status IN ('failed', 'dead_letter')
           OR (j.status = 'scheduled' AND j.last_error IS NOT NULL))
)
SELECT f.error_fingerprint AS fingerprint, count(*) AS count,
       count(*) FILTER (WHERE f.status = 'dead_letter') AS dead_lettered,
       count(*) FILTER (WHERE f.status <> 'dead_letter') AS retrying,
       min(f.seen_at) AS first_seen_at, max(f.seen_at) AS last_seen_at,
       array_agg(DISTINCT f.handler ORDER BY f.handler) AS handlers,
       array_agg(DISTINCT q.name ORDER BY q.name) AS queues,
       max(f.id) AS sample_job_id,
       (array_agg(f.last_error ORDER BY f.id DESC))[1] AS sample_error,
       coalesce(%(now)s, now()) AS now
FROM failing f
JOIN queues q ON q.id = f.queue_id
WHERE (%(fingerprint)s::text IS NULL OR f.error_fingerprint = %(fingerprint)s::text)
GROUP BY f.error_fingerprint
ORDER BY max(f.seen_at) DESC, f.error_fingerprint
LIMIT %(limit)s

-- name: failure_trend
-- Failing jobs per fingerprint per hour over the last 24 hours (the groups' small trend).
-- explain: {"fingerprints": ["abc"]}
SELECT j.error_fingerprint AS fingerprint,
       date_trunc('hour', coalesce(j.finished_at, j.updated_at)) AS hour, count(*) AS n
FROM jobs j
WHERE j.project_id = %(project_id)s AND j.error_fingerprint = ANY(%(fingerprints)s::text[])
  AND (j.status IN ('failed', 'dead_letter')
       OR (j.status = 'scheduled' AND j.last_error IS NOT NULL))
  AND coalesce(j.finished_at, j.updated_at)
      >= date_trunc('hour', coalesce(%(now)s, now())) - interval '23 hours'
GROUP BY 1, 2

-- name: failure_group_ids
-- One batch of a failure group's jobs in the given states, newest first below a cursor.
-- explain: {"fingerprint": "abc", "statuses": ["dead_letter"], "before_id": null, "limit": 500}
SELECT j.id
FROM jobs j
WHERE j.project_id = %(project_id)s AND j.error_fingerprint = %(fingerprint)s
  AND j.status = ANY(%(statuses)s::job_status[])
  AND (j.status <> 'scheduled' OR j.last_error IS NOT NULL)
  AND (%(before_id)s::bigint IS NULL OR j.id < %(before_id)s::bigint)
ORDER BY j.id DESC
LIMIT %(limit)s
