"""Per-queue statistics rolled up by the scheduler, so charts and /metrics never scan `jobs`.

- `queue_stats`: one row per queue and minute — runs finished by outcome, jobs enqueued, retried
  and dead-lettered, and histograms (bucket counts, not cumulative) of run time and queue wait.
  Kept for 8 days; `queue_stats_hourly` holds the same per hour (the 24-hour and 7-day charts).
- `queue_stats_totals`: the same counters since the queue was created, never pruned: the
  Prometheus counters and histograms are monotonic across restarts and rollup retention.
- `stats_watermarks`: the last row id folded from each source table (job_executions, jobs,
  dead_letter_jobs); the fold locks its row FOR UPDATE SKIP LOCKED, so scheduler replicas never
  fold a row twice.
- `int8_array_add` / `int8_array_sum`: element-wise sum of histogram arrays.
- `dead_letter_jobs_open_idx`: dead letters not replayed, per project and queue (the counts on
  the overview, the queue page and /metrics read it instead of every dead letter ever kept).
- `job_executions_worker_idx` becomes (worker_id, id): the worker page's "recent runs" reads a
  worker's newest runs from it instead of sorting all of them (still one index, same write cost).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 12:00
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION int8_array_add(a bigint[], b bigint[]) RETURNS bigint[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY o), '{}')
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, o)
$$;

CREATE AGGREGATE int8_array_sum(bigint[]) (
    SFUNC = int8_array_add, STYPE = bigint[], INITCOND = '{}'
);

CREATE TABLE queue_stats (
    queue_id bigint NOT NULL REFERENCES queues(id) ON DELETE CASCADE,
    bucket timestamptz NOT NULL,
    enqueued bigint NOT NULL DEFAULT 0 CHECK (enqueued >= 0),
    succeeded bigint NOT NULL DEFAULT 0 CHECK (succeeded >= 0),
    failed bigint NOT NULL DEFAULT 0 CHECK (failed >= 0),
    timed_out bigint NOT NULL DEFAULT 0 CHECK (timed_out >= 0),
    lease_lost bigint NOT NULL DEFAULT 0 CHECK (lease_lost >= 0),
    released bigint NOT NULL DEFAULT 0 CHECK (released >= 0),
    cancelled bigint NOT NULL DEFAULT 0 CHECK (cancelled >= 0),
    retried bigint NOT NULL DEFAULT 0 CHECK (retried >= 0),
    dead_lettered bigint NOT NULL DEFAULT 0 CHECK (dead_lettered >= 0),
    run_hist bigint[] NOT NULL DEFAULT '{}',
    run_sum_ms double precision NOT NULL DEFAULT 0,
    wait_hist bigint[] NOT NULL DEFAULT '{}',
    wait_sum_ms double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, bucket),
    CONSTRAINT queue_stats_minute CHECK (bucket = date_trunc('minute', bucket)),
    CONSTRAINT queue_stats_hist_len CHECK (cardinality(run_hist) <= 64
                                           AND cardinality(wait_hist) <= 64)
);
CREATE INDEX queue_stats_bucket_idx ON queue_stats (bucket);

-- The same per hour: the 24-hour and 7-day charts read at most 168 rows per queue.
-- Spelled out, not LIKE queue_stats: PostgreSQL 18 would copy the NOT NULL constraints' names
-- (queue_stats_*_not_null), 15 has none to copy, and the schema would differ between them.
CREATE TABLE queue_stats_hourly (
    queue_id bigint NOT NULL REFERENCES queues(id) ON DELETE CASCADE,
    bucket timestamptz NOT NULL,
    enqueued bigint NOT NULL DEFAULT 0 CHECK (enqueued >= 0),
    succeeded bigint NOT NULL DEFAULT 0 CHECK (succeeded >= 0),
    failed bigint NOT NULL DEFAULT 0 CHECK (failed >= 0),
    timed_out bigint NOT NULL DEFAULT 0 CHECK (timed_out >= 0),
    lease_lost bigint NOT NULL DEFAULT 0 CHECK (lease_lost >= 0),
    released bigint NOT NULL DEFAULT 0 CHECK (released >= 0),
    cancelled bigint NOT NULL DEFAULT 0 CHECK (cancelled >= 0),
    retried bigint NOT NULL DEFAULT 0 CHECK (retried >= 0),
    dead_lettered bigint NOT NULL DEFAULT 0 CHECK (dead_lettered >= 0),
    run_hist bigint[] NOT NULL DEFAULT '{}',
    run_sum_ms double precision NOT NULL DEFAULT 0,
    wait_hist bigint[] NOT NULL DEFAULT '{}',
    wait_sum_ms double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, bucket),
    CONSTRAINT queue_stats_hourly_hour CHECK (bucket = date_trunc('hour', bucket)),
    CONSTRAINT queue_stats_hourly_hist_len CHECK (cardinality(run_hist) <= 64
                                                  AND cardinality(wait_hist) <= 64)
);
CREATE INDEX queue_stats_hourly_bucket_idx ON queue_stats_hourly (bucket);

CREATE TABLE queue_stats_totals (
    queue_id bigint PRIMARY KEY REFERENCES queues(id) ON DELETE CASCADE,
    enqueued bigint NOT NULL DEFAULT 0 CHECK (enqueued >= 0),
    succeeded bigint NOT NULL DEFAULT 0 CHECK (succeeded >= 0),
    failed bigint NOT NULL DEFAULT 0 CHECK (failed >= 0),
    timed_out bigint NOT NULL DEFAULT 0 CHECK (timed_out >= 0),
    lease_lost bigint NOT NULL DEFAULT 0 CHECK (lease_lost >= 0),
    released bigint NOT NULL DEFAULT 0 CHECK (released >= 0),
    cancelled bigint NOT NULL DEFAULT 0 CHECK (cancelled >= 0),
    retried bigint NOT NULL DEFAULT 0 CHECK (retried >= 0),
    dead_lettered bigint NOT NULL DEFAULT 0 CHECK (dead_lettered >= 0),
    run_hist bigint[] NOT NULL DEFAULT '{}',
    run_sum_ms double precision NOT NULL DEFAULT 0,
    run_count bigint NOT NULL DEFAULT 0 CHECK (run_count >= 0),
    wait_hist bigint[] NOT NULL DEFAULT '{}',
    wait_sum_ms double precision NOT NULL DEFAULT 0,
    wait_count bigint NOT NULL DEFAULT 0 CHECK (wait_count >= 0),
    CONSTRAINT queue_stats_totals_hist_len CHECK (cardinality(run_hist) <= 64
                                                  AND cardinality(wait_hist) <= 64)
);

CREATE TABLE stats_watermarks (
    source text PRIMARY KEY CHECK (source IN ('executions', 'jobs', 'dead_letters')),
    last_id bigint NOT NULL DEFAULT 0 CHECK (last_id >= 0),
    folded_at timestamptz
);
DROP INDEX job_executions_worker_idx;
CREATE INDEX job_executions_worker_idx ON job_executions (worker_id, id)
    WHERE worker_id IS NOT NULL;
CREATE INDEX dead_letter_jobs_open_idx ON dead_letter_jobs (project_id, queue_id)
    WHERE replayed_at IS NULL;

INSERT INTO stats_watermarks (source, last_id)
SELECT 'executions', coalesce(max(id), 0) FROM job_executions
UNION ALL SELECT 'jobs', coalesce(max(id), 0) FROM jobs
UNION ALL SELECT 'dead_letters', coalesce(max(id), 0) FROM dead_letter_jobs;
"""

DOWNGRADE = r"""
DROP INDEX dead_letter_jobs_open_idx;
DROP INDEX job_executions_worker_idx;
CREATE INDEX job_executions_worker_idx ON job_executions (worker_id) WHERE worker_id IS NOT NULL;
DROP TABLE stats_watermarks;
DROP TABLE queue_stats_totals;
DROP TABLE queue_stats_hourly;
DROP TABLE queue_stats;
DROP AGGREGATE int8_array_sum(bigint[]);
DROP FUNCTION int8_array_add(bigint[], bigint[]);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
