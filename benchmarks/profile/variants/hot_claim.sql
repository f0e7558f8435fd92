-- Experiment (docs/BENCHMARKS.md, "HOT claim and completion"): a HOT claim. No index of jobs
-- names status, worker_id or lock_expires_at; fillfactor 40 leaves each claimed row room on its
-- page. Not a migration. Applies to the schema of migration 0029 on, whose held set (job_held)
-- holds every held job with its worker: the experiment's first step, made a migration.
ALTER TABLE jobs ADD COLUMN cold_status job_status GENERATED ALWAYS AS (
    CASE WHEN status IN ('waiting', 'scheduled', 'done', 'dead_letter', 'cancelled') THEN status END
) STORED;
DROP INDEX jobs_project_status_idx;
DROP INDEX jobs_worker_idx;
DROP INDEX jobs_scheduled_idx;
CREATE INDEX jobs_cold_status_idx ON jobs (project_id, cold_status, id DESC) INCLUDE (queue_id, run_at)
    WHERE cold_status IS NOT NULL;
CREATE INDEX jobs_due_idx ON jobs (run_at) WHERE cold_status = 'scheduled';
ALTER TABLE jobs SET (fillfactor = 40);
