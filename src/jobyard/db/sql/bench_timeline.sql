-- The timeline scenarios (`jobyard bench --scenario steady|pressure|burndown`,
-- benchmarks/timeline.py): live samples of the database's state, the load they put on it, and
-- the per-window numbers read back afterwards from what the engine recorded. Nothing here names
-- a queue table other than `jobs` and `job_executions`: the hot relations are found by name
-- pattern and by write activity, so the same queries measure any storage design.

-- name: bench_timeline_sample
-- Database clock, the age of the oldest hold on this database's xmin horizon (in transactions
-- and seconds; who holds it is the view of migration 0019, which the workers' claim rule and the
-- health probe read too), the same for holders in this database only (the run's own hold, and
-- not another database's xid), executions so far, and the WAL the whole server has written
-- (bytes from the insert position; full-page images as counted by pg_stat_wal, which backends
-- report up to a second late).
SELECT clock_timestamp() AS at, h.xmin_age, h.xmin_age_here, h.oldest_xact_s,
       (SELECT coalesce(max(id), 0) FROM job_executions) AS executions,
       (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS wal_bytes,
       (SELECT w.wal_fpi FROM pg_stat_wal w) AS wal_fpi
-- One read of the view (and of pg_stat_activity under it) for the three figures.
FROM (SELECT max(v.xmin_age_xids) AS xmin_age,
             max(v.xmin_age_xids) FILTER (WHERE v.database = current_database()) AS xmin_age_here,
             extract(epoch FROM clock_timestamp() - min(v.since))::float8 AS oldest_xact_s
      FROM xmin_horizon_holders v) h

-- name: bench_timeline_relations
-- Every table of this schema (partitions included): dead and live tuples, rows written so far,
-- and its total size with indexes and TOAST.
SELECT t.relname AS relation, t.n_dead_tup AS dead, t.n_live_tup AS live,
       t.n_tup_ins + t.n_tup_upd + t.n_tup_del AS writes,
       pg_total_relation_size(t.relid) AS bytes
FROM pg_stat_user_tables t
WHERE t.schemaname = current_schema()
ORDER BY t.relname

-- name: bench_timeline_completions
-- Executions finished in each window [bounds[i-1], bounds[i]) (bucket i; 0 before, n after).
SELECT width_bucket(e.finished_at, %(bounds)s::timestamptz[]) AS bucket, count(*) AS completions
FROM job_executions e
GROUP BY 1

-- name: bench_timeline_pickup
-- Pickup latency of the first executions claimed in each window: claim time (started_at) minus
-- the time the job became due (run_at, or created_at if later), database clock, ms.
SELECT bucket, count(*) AS jobs,
       percentile_cont(0.50) WITHIN GROUP (ORDER BY ms) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99,
       max(ms) AS max
FROM (SELECT width_bucket(e.started_at, %(bounds)s::timestamptz[]) AS bucket,
             extract(epoch FROM e.started_at - greatest(j.run_at, j.created_at)) * 1000 AS ms
      FROM job_executions e JOIN jobs j ON j.id = e.job_id
      WHERE e.execution_seq = 1) AS latency
GROUP BY bucket

-- name: bench_timeline_quarters
-- A burn-down's executions in finishing order cut into four equal parts: each part's size and
-- last finish, and the first claim of all (where the first part's time starts).
SELECT quarter, count(*) AS jobs, max(finished_at) AS last_finished,
       (SELECT min(started_at) FROM job_executions) AS first_started
FROM (SELECT finished_at, ntile(4) OVER (ORDER BY finished_at, id) AS quarter
      FROM job_executions) AS ordered
GROUP BY quarter
ORDER BY quarter

-- name: bench_timeline_done
-- How many jobs are done (the burn-down's end test, run once the executions say it may be).
SELECT count(*) AS done FROM jobs WHERE status = 'done'

-- name: bench_timeline_hold_xid
-- Take a transaction id and keep it: run in a transaction left open, it holds the xmin horizon
-- (an analytics session or a forgotten `BEGIN` on the application's database).
SELECT txid_current() AS xid

-- name: bench_timeline_repeatable_read
-- The first statement of a reader's transaction: one snapshot for all its scans.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ

-- name: bench_timeline_count_function
-- A reader's helper, private to its session: count the rows of a table named at run time.
CREATE FUNCTION pg_temp.jobyard_bench_count(rel regclass) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM %%s', rel) INTO n;
    RETURN n;
END
$$

-- name: bench_timeline_scan
-- A reader's scan: count the rows of every table of this schema whose name matches one of the
-- patterns (a partitioned table once, through its parent), whatever tables the design has.
SELECT c.relname AS relation, pg_temp.jobyard_bench_count(c.oid::regclass) AS n
FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
WHERE ns.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND c.relname LIKE ANY (%(patterns)s::text[])

-- name: bench_activity_waits
-- The active sessions of this database other than the sampler's own: what each waits on
-- (`CPU`: on nothing, so running or runnable), its kind (autovacuum or a client), and the head of
-- its statement (a client's; matched to a named query by the sampler).
SELECT CASE WHEN a.backend_type = 'client backend' THEN '' ELSE a.backend_type || ' ' END
       || coalesce(a.wait_event_type || ':' || a.wait_event, 'CPU') AS wait,
       CASE WHEN a.backend_type = 'client backend' THEN a.query END AS query
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.state = 'active' AND a.pid <> pg_backend_pid()

-- name: bench_activity_maintenance
-- Every VACUUM and ANALYZE of this database in progress: the table, the command and its phase,
-- and who runs it.
SELECT m.relid::regclass::text || ': ' || m.command || ' ' || m.phase AS relation,
       CASE WHEN a.backend_type = 'autovacuum worker' THEN 'autovacuum'
            ELSE coalesce(nullif(a.application_name, ''), a.backend_type) END AS by
FROM (SELECT pid, datid, relid, 'VACUUM' AS command, phase FROM pg_stat_progress_vacuum
      UNION ALL
      SELECT pid, datid, relid, 'ANALYZE', phase FROM pg_stat_progress_analyze) m
LEFT JOIN pg_stat_activity a ON a.pid = m.pid
WHERE m.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
