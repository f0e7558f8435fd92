-- Readiness probes for /readyz. Used only by jobyard/api/health.py.

-- name: health_schema_revision
-- The Alembic revision the database is migrated to (fails if it was never migrated).
SELECT version_num FROM alembic_version
