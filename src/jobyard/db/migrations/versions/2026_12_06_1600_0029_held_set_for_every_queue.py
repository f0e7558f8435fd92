"""job_held holds the held jobs of every queue, with their worker; `jobs_held_idx` is gone.

Until now the held set (0022) held only the jobs of queues with a limit, and every other read of
held jobs went to `jobs_held_idx`, the partial index of `claimed`/`running` rows on `jobs`. That
index has the weakness the held set was made to avoid: every job run since a long transaction
began keeps a dead entry there, and the reaper, the why-panel and the workers' pages walked
them. It is also one of the indexes that keep the claim from being a HOT update (a claim changes
`status` and `lock_expires_at`), the largest single cost left on the server side of a drain
(docs/BENCHMARKS.md, "the HOT claim and completion, measured as schema experiments"). So:

- `job_held (slot, job_id, queue_id, worker_id)`: a row for every held job of every queue,
  written by the claim's statement trigger as before, now without asking whether the queue has
  a limit, and with the worker that claimed it (a held job's worker is only ever set by the
  claim that made it held). A job inserted already held (an import, a test fixture) gets its
  row from a row trigger whose WHEN is false for every enqueue, so enqueues pay nothing.
- The rotation keeps the worker too. Everything else about the set (partitions, ring, rotation,
  the count for the claim's room) is as in 0022–0025.
- Nothing is ever incomplete any more, so `queues.held_counted`, `queues.held_fill_after`,
  `job_held_fill`, the `queues_held_reset` trigger and `queues_limited_idx` go: a limit set on a
  busy queue is enforced from its next claim on, with no fill to wait for.
- `jobs_held_idx` goes; its readers read `job_held` (SQL in db/sql: the reaper, the why-panel,
  the workers' pages and `/metrics`).

The set is rebuilt from `jobs` under a SHARE ROW EXCLUSIVE lock on `jobs` (no job changes state
meanwhile; held jobs are few, read through `jobs_held_idx` before it is dropped).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06 16:00
"""

from __future__ import annotations

import importlib

from alembic import op

from jobyard.db.migrations import earlier

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

_HELD_0022 = "jobyard.db.migrations.versions.2026_12_05_0800_0022_job_held"
_RING_0025 = "jobyard.db.migrations.versions.2026_12_06_0300_0025_set_ring"
_COUNT_0023 = "jobyard.db.migrations.versions.2026_12_05_1500_0023_held_count_marks_dead"

UPGRADE = r"""
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE job_held ADD COLUMN worker_id bigint;
-- The reaper's "what else did this worker hold" and a worker's page, by worker.
CREATE INDEX job_held_0_worker_idx ON job_held_0 (worker_id);
CREATE INDEX job_held_1_worker_idx ON job_held_1 (worker_id);
CREATE INDEX job_held_2_worker_idx ON job_held_2 (worker_id);
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
    -- Left a held state (completion, failure, retry, release, lease expiry, cancel).
    IF EXISTS (SELECT FROM old_jobs WHERE status IN ('claimed', 'running'))
       AND EXISTS (SELECT FROM new_jobs WHERE status NOT IN ('claimed', 'running')) THEN
        DELETE FROM job_held h USING new_jobs n
        WHERE h.job_id = n.id AND n.status NOT IN ('claimed', 'running');
    END IF;
    -- Entered one (a claim). Heartbeats and starts (held before and after) do neither.
    IF EXISTS (SELECT FROM new_jobs WHERE status IN ('claimed', 'running'))
       AND EXISTS (SELECT FROM old_jobs WHERE status NOT IN ('claimed', 'running')) THEN
        INSERT INTO job_held (slot, job_id, queue_id, worker_id)
        SELECT (SELECT (last_value % 3)::smallint FROM job_held_ring), n.id, n.queue_id,
               n.worker_id
        FROM new_jobs n
        WHERE n.status IN ('claimed', 'running')
          AND NOT EXISTS (SELECT FROM job_held h WHERE h.job_id = n.id);
    END IF;
    RETURN NULL;
END $$;

-- A job inserted already held (never by jobyard itself: imports, test fixtures).
CREATE FUNCTION jobs_held_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_held (slot, job_id, queue_id, worker_id)
    VALUES ((SELECT (last_value % 3)::smallint FROM job_held_ring), NEW.id, NEW.queue_id,
            NEW.worker_id);
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_held_ins AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.status IN ('claimed', 'running')) EXECUTE FUNCTION jobs_held_insert();

CREATE OR REPLACE FUNCTION job_held_rotate(wait_ms integer DEFAULT 20, held_ms integer DEFAULT 1000)
RETURNS text LANGUAGE sql AS $$
    SELECT job_set_rotate(
        'job_held',
        't.job_id, t.queue_id, t.worker_id FROM %I t'
        ' WHERE (SELECT j.status::text FROM jobs j WHERE j.id = t.job_id)'
        ' IN (''claimed'', ''running'')',
        wait_ms, held_ms)
$$;

TRUNCATE job_held;
INSERT INTO job_held (slot, job_id, queue_id, worker_id)
SELECT (SELECT (last_value % 3)::smallint FROM job_held_ring), j.id, j.queue_id, j.worker_id
FROM jobs j
WHERE j.status IN ('claimed', 'running');

DROP TRIGGER queues_held_reset ON queues;
DROP FUNCTION queues_held_reset();
DROP FUNCTION job_held_fill();
DROP INDEX queues_limited_idx;
ALTER TABLE queues DROP COLUMN held_counted, DROP COLUMN held_fill_after;
DROP INDEX jobs_held_idx;
COMMENT ON FUNCTION job_held_count(bigint) IS
    'Held jobs of a queue, by index-only scans that mark dead entries (migrations 0023, 0029)';
"""

DOWNGRADE_FIRST = r"""
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;
CREATE INDEX jobs_held_idx ON jobs (queue_id, lock_expires_at) WHERE status IN ('claimed', 'running');
ALTER TABLE queues
    ADD COLUMN held_counted boolean NOT NULL DEFAULT false,
    ADD COLUMN held_fill_after xid8;
-- The set holds every held job here, so the limited queues' sets are complete.
UPDATE queues SET held_counted = true WHERE max_concurrency IS NOT NULL;
CREATE INDEX queues_limited_idx ON queues (id) WHERE max_concurrency IS NOT NULL;
COMMENT ON COLUMN queues.held_counted IS
    'job_held holds a row for every held job of this queue: the claim counts there (migration 0022)';
COMMENT ON COLUMN queues.held_fill_after IS
    'job_held_fill completes the set once every transaction older than this has ended';
DROP TRIGGER jobs_held_ins ON jobs;
DROP FUNCTION jobs_held_insert();
"""

DOWNGRADE_LAST = r"""
ALTER TABLE job_held DROP COLUMN worker_id;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    ring = importlib.import_module(_RING_0025)
    op.execute(DOWNGRADE_FIRST)
    op.execute(earlier.statement(_HELD_0022, "CREATE FUNCTION queues_held_reset()", "$$;"))
    op.execute(earlier.statement(_HELD_0022, "CREATE TRIGGER queues_held_reset", ";"))
    op.execute(ring._held("job_held_fill").replace(" OR REPLACE", "", 1))
    op.execute(ring._held("jobs_held_sync"))
    op.execute(ring._function(_HELD_0022, "job_held_rotate"))
    op.execute(earlier.statement(_COUNT_0023, "COMMENT ON FUNCTION job_held_count", "';"))
    op.execute(DOWNGRADE_LAST)
