-- name: read_job_logs_newest
-- Log lines of one job, newest first, keyset on id below a cursor (job_logs_job_idx read backwards).
-- explain: {"before_id": null, "limit": 101}
SELECT l.id, l.job_id, l.execution_seq, l.level, l.message, l.fields, l.created_at
FROM job_logs l
JOIN jobs j ON j.id = l.job_id
WHERE j.project_id = %(project_id)s AND l.job_id = %(job_id)s
  AND (%(before_id)s::bigint IS NULL OR l.id < %(before_id)s::bigint)
ORDER BY l.id DESC
LIMIT %(limit)s
