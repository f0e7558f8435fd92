-- Experiment (docs/BENCHMARKS.md, "HOT claim and completion"): the completion HOT too, on the
-- schema of migration 0030 (whose claim is HOT). `done` joins the status group of queued,
-- claimed and running, so completing a job changes no value of jobs_project_group_idx, and
-- finished_at is a BRIN index (PostgreSQL 16 and later do not count a BRIN index against HOT).
-- Not a migration: a list of done jobs would then walk the group's entries, and retention's
-- ordered scan of finished_at becomes a bitmap scan of block ranges. Run on an empty jobs table
-- (the stored column keeps the values it was computed with).
CREATE OR REPLACE FUNCTION job_status_group(s job_status) RETURNS job_status
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN s IN ('claimed', 'running', 'done') THEN 'queued'::job_status ELSE s END;
DROP INDEX jobs_finished_idx;
CREATE INDEX jobs_finished_brin ON jobs USING brin (finished_at);
