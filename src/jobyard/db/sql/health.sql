-- Readiness probes for /readyz. Used only by jobyard/api/health.py.

-- name: health_schema_revision
-- The Alembic revision the database is migrated to (fails if it was never migrated).
SELECT version_num FROM alembic_version

-- name: health_schema_migrated
-- Whether Alembic's version table exists (false on a database jobyard never migrated).
SELECT to_regclass('alembic_version') IS NOT NULL AS migrated

-- name: health_xmin_holder
-- The backend that holds the xmin horizon back the longest (vacuum cannot remove rows dead since
-- it started): by its snapshot's xmin, or by its own xid (an idle transaction that wrote or took
-- an xid holds it without a snapshot). Its age in seconds and in transactions; none when no one.
-- Autovacuum workers are left out: a VACUUM shows a backend_xmin for as long as it runs (minutes
-- on a large table) but does not hold the horizon, and their ANALYZE holds it only briefly.
SELECT a.pid, a.datname, a.application_name, a.state,
       greatest(0, extract(epoch FROM now() - coalesce(a.xact_start, a.query_start)))::float8
           AS age_s,
       greatest(age(a.backend_xmin), age(a.backend_xid))::bigint AS xmin_age_xids
FROM pg_stat_activity a
WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL) AND a.pid <> pg_backend_pid()
  AND a.backend_type <> 'autovacuum worker'
ORDER BY greatest(age(a.backend_xmin), age(a.backend_xid)) DESC, a.xact_start
LIMIT 1

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
