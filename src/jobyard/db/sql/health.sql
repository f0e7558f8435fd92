-- Readiness probes for /readyz. Used only by jobyard/api/health.py.

-- name: health_schema_revision
-- The Alembic revision the database is migrated to (fails if it was never migrated).
SELECT version_num FROM alembic_version

-- name: health_schema_migrated
-- Whether Alembic's version table exists (false on a database jobyard never migrated).
SELECT to_regclass('alembic_version') IS NOT NULL AS migrated

-- name: health_xmin_holders
-- Every holder of this database's xmin horizon (vacuum cannot remove rows dead since its hold
-- began), the one that keeps it back the furthest first: a session, prepared transaction or
-- replication slot, from the view of migrations 0019 and 0021, with its age in seconds (0 when
-- its start is unknown: `since` is NULL) and in transactions. At most one row per connection,
-- prepared transaction or slot: max_connections + max_prepared_transactions +
-- max_replication_slots.
SELECT h.pid, h.database, h.application_name, h.state, h.held_by, h.since,
       greatest(0, extract(epoch FROM clock_timestamp() - h.since))::float8 AS age_s,
       h.xmin_age_xids
FROM xmin_horizon_holders h
ORDER BY h.xmin_age_xids DESC NULLS LAST, h.since

-- name: health_dead_tuples
-- Dead-tuple ratio of this schema's tables: every hot relation (names matching a %(hot)s LIKE
-- pattern: `jobs`, the ready-queue tables and their partitions), then the `limit` others with
-- the most dead rows.
-- explain: {"hot": ["jobs"], "limit": 8}
WITH t AS (
    SELECT t.relname AS relation, t.n_live_tup AS live, t.n_dead_tup AS dead,
           coalesce(t.n_dead_tup::float8 / nullif(t.n_live_tup + t.n_dead_tup, 0), 0)::float8
               AS dead_ratio,
           greatest(t.last_autovacuum, t.last_vacuum) AS last_vacuum,
           t.relname::text LIKE ANY (%(hot)s::text[]) AS hot
    FROM pg_stat_user_tables t
    WHERE t.schemaname = current_schema()
)
SELECT * FROM (
    SELECT * FROM t WHERE t.hot
    UNION ALL
    (SELECT * FROM t WHERE NOT t.hot ORDER BY t.dead DESC, t.relation LIMIT %(limit)s)
) r
ORDER BY r.hot DESC, r.dead DESC, r.relation
