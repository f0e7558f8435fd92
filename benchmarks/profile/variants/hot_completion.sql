-- Experiment (docs/BENCHMARKS.md, "HOT claim and completion"), applied after hot_claim.sql:
-- the completion HOT too. `done` is left out of cold_status, and finished_at is a BRIN index
-- (PostgreSQL 16+ does not count a BRIN index against HOT). Not a migration. PostgreSQL 17+
-- (SET EXPRESSION).
ALTER TABLE jobs ALTER COLUMN cold_status SET EXPRESSION AS (
    CASE WHEN status IN ('waiting', 'scheduled', 'dead_letter', 'cancelled') THEN status END
);
DROP INDEX jobs_finished_idx;
CREATE INDEX jobs_finished_brin ON jobs USING brin (finished_at);
