-- Readiness probes for /readyz. Used only by jobyard/api/health.py.

-- name: health_schema_revision
-- The Alembic revision the database is migrated to (fails if it was never migrated).
SELECT version_num FROM alembic_version

-- name: health_schema_migrated
-- Whether Alembic's version table exists (false on a database jobyard never migrated).
SELECT to_regclass('alembic_version') IS NOT NULL AS migrated
