"""job_ready_rotate gives up at once when a long transaction holds the partition it would empty.

The rotation takes ACCESS EXCLUSIVE on the partition that becomes current next, with a
`lock_timeout` of 20 ms. A REPEATABLE READ reader that has scanned the ready set (the
active-readers cell of issue 15) holds ACCESS SHARE on every partition until it ends, so every
attempt waited its full 20 ms and gave up. While it waited, every claim, enqueue and completion
that touches that partition queued behind the pending exclusive request: two workers trying once
a second stalled the whole hot path for 4 % of the time, which is where the readers cell's pickup
p99 went (31 ms against a 7 ms baseline).

Before asking for the lock the function now looks in `pg_locks` for a granted lock on the
partition held by another session whose transaction is older than `held_ms` (1 s by default):
such a holder will not let go within `wait_ms`, so it returns 'locked' without queueing. Claims'
own short transactions are younger than that and do not count; a reader that arrives after the
check still costs at most `wait_ms`, as before. A holder whose `xact_start` this role may not see
(another role, without pg_read_all_stats) is not counted either: for it the rotation falls back to
the bounded wait.

The signature gains `held_ms`, so the old function is dropped first (keeping both would make a
call with one argument ambiguous).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 21:00
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# 0015's function, which this extends (and the downgrade restores).
_SMALL_MOVES = "jobyard.db.migrations.versions.2026_12_03_1830_0015_rotate_small_moves"

# The signature line of 0015's function, and the line this migration's check goes before.
_OLD_HEAD = "CREATE OR REPLACE FUNCTION job_ready_rotate(wait_ms integer DEFAULT 20) RETURNS text"
_NEW_HEAD = """DROP FUNCTION job_ready_rotate(integer);

CREATE FUNCTION job_ready_rotate(wait_ms integer DEFAULT 20, held_ms integer DEFAULT 1000)
RETURNS text"""
_BEFORE = "    PERFORM set_config('lock_timeout', wait_ms || 'ms', true);\n"
_CHECK = """    -- A long transaction holding the partition (a REPEATABLE READ reader) will not let go within
    -- wait_ms, and claims would queue behind our pending exclusive request all that time: give
    -- up without asking (migration 0017).
    IF EXISTS (
        SELECT 1
        FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'relation'
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.relation = target::regclass::oid
          AND l.granted
          AND l.pid <> pg_backend_pid()
          AND a.xact_start < clock_timestamp() - make_interval(secs => held_ms / 1000.0)
    ) THEN
        RETURN 'locked';
    END IF;
"""


def _rewritten() -> str:
    """0015's function with held_ms and the check before the lock."""
    body: str = importlib.import_module(_SMALL_MOVES).UPGRADE
    assert body.count(_OLD_HEAD) == 1 and body.count(_BEFORE) == 1
    return body.replace(_OLD_HEAD, _NEW_HEAD).replace(_BEFORE, _CHECK + _BEFORE)


def upgrade() -> None:
    op.execute(_rewritten())


def downgrade() -> None:
    op.execute("DROP FUNCTION job_ready_rotate(integer, integer)")
    op.execute(importlib.import_module(_SMALL_MOVES).UPGRADE)
