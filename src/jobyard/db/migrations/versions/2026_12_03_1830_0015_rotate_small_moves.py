"""job_ready_rotate moves at most a few thousand live rows; a backlog waits for its partition.

0012's rotation empties the partition that becomes current next by copying its live rows into
the current one and truncating it, under ACCESS EXCLUSIVE. With a backlog — 1,000,000 jobs
enqueued at once, or an offered rate above what the workers drain — nearly every row of that
partition is live: each rotation copied the whole backlog (1.2–1.4 s a call at 300,000 rows
in the 80 %-of-drain pressure run), every two seconds, while every claim waited for the lock.
Throughput fell to a fifth of the offered rate and the backlog grew, which made the next copy
longer.

A partition holding more than 2,000 live rows is now left alone: the
function returns 'crowded' after counting at most that many rows, without any lock. Its dead
rows stay until the claims have drained it below the cap; without a held horizon vacuum and
the index's killed entries keep them cheap meanwhile, as for any table. The copy under the
lock is therefore bounded (a few milliseconds), whatever the backlog.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03 18:30
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# 0012's function, restored by the downgrade.
_READY = "jobyard.db.migrations.versions.2026_12_03_1500_0012_job_ready"

UPGRADE = r"""
CREATE OR REPLACE FUNCTION job_ready_rotate(wait_ms integer DEFAULT 20) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    current_slot smallint := job_ready_slot(clock_timestamp());
    target text := format('job_ready_%s', (current_slot + 1) % 3);
    live integer;
BEGIN
    IF pg_relation_size(target::regclass) = 0 THEN
        RETURN 'clean';
    END IF;
    -- A backlog: copying it under the exclusive lock would stall every claim. Counted before
    -- any lock, reading at most 2,001 rows, so a crowded partition costs little.
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I LIMIT 2001) s', target) INTO live;
    IF live > 2000 THEN
        RETURN 'crowded';
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('jobyard.job_ready_rotate')) THEN
        RETURN 'busy';
    END IF;
    PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
    BEGIN
        EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', target);
    EXCEPTION WHEN lock_not_available THEN
        RETURN 'locked';
    END;
    EXECUTE format(
        'INSERT INTO %I (slot, job_id, queue_id, priority, run_at, suspect)'
        ' SELECT %s, job_id, queue_id, priority, run_at, suspect FROM %I',
        format('job_ready_%s', current_slot), current_slot, target);
    EXECUTE format('TRUNCATE %I', target);
    RETURN 'rotated';
END $$;
"""


def _rotate_of_0012() -> str:
    """0012's CREATE FUNCTION job_ready_rotate statement, as OR REPLACE."""
    text: str = importlib.import_module(_READY).UPGRADE
    start = text.index("CREATE FUNCTION job_ready_rotate")
    end = text.index("END $$;", start) + len("END $$;")
    return text[start:end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(_rotate_of_0012())
