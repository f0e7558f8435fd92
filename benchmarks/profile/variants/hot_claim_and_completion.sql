-- Experiment (docs/BENCHMARKS.md, "HOT claim and completion"): the claim and the completion HOT.
-- As hot_claim.sql, and `done` is left out of cold_status and finished_at is a BRIN index (which
-- PostgreSQL 16+ does not count against HOT). Not a migration.
ALTER TABLE jobs ADD COLUMN cold_status job_status GENERATED ALWAYS AS (
    CASE WHEN status IN ('waiting', 'scheduled', 'dead_letter', 'cancelled') THEN status END
) STORED;
DROP INDEX jobs_project_status_idx;
DROP INDEX jobs_held_idx;
DROP INDEX jobs_worker_idx;
DROP INDEX jobs_scheduled_idx;
CREATE INDEX jobs_cold_status_idx ON jobs (project_id, cold_status, id DESC) INCLUDE (queue_id, run_at)
    WHERE cold_status IS NOT NULL;
CREATE INDEX jobs_due_idx ON jobs (run_at) WHERE cold_status = 'scheduled';
ALTER TABLE jobs SET (fillfactor = 40);
ALTER TABLE job_held ADD COLUMN worker_id bigint;
CREATE INDEX job_held_worker_idx ON job_held (worker_id);
CREATE OR REPLACE FUNCTION jobs_held_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE job_held;
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT FROM gone WHERE status IN ('claimed', 'running')) THEN
            DELETE FROM job_held h USING gone g WHERE h.job_id = g.id;
        END IF;
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT FROM old_jobs WHERE status IN ('claimed', 'running'))
       AND EXISTS (SELECT FROM new_jobs WHERE status NOT IN ('claimed', 'running')) THEN
        DELETE FROM job_held h
        WHERE h.job_id = ANY (ARRAY(SELECT n.id FROM new_jobs n WHERE n.status NOT IN ('claimed', 'running')));
    END IF;
    IF EXISTS (SELECT FROM new_jobs WHERE status IN ('claimed', 'running'))
       AND EXISTS (SELECT FROM old_jobs WHERE status NOT IN ('claimed', 'running')) THEN
        INSERT INTO job_held (slot, job_id, queue_id, worker_id)
        SELECT (SELECT (last_value % 3)::smallint FROM job_held_ring), n.id, n.queue_id, n.worker_id
        FROM new_jobs n
        WHERE n.status IN ('claimed', 'running')
          AND NOT EXISTS (SELECT FROM job_held h WHERE h.job_id = n.id);
    END IF;
    RETURN NULL;
END $$;
DROP INDEX jobs_finished_idx;
CREATE INDEX jobs_finished_brin ON jobs USING brin (finished_at);
