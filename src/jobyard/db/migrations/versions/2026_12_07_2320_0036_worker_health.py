"""What a worker knows about its own health, where operators can read it.

A worker saw two things only its log told: an `async def` handler blocking the event loop (no
other job, heartbeat or claim runs meanwhile) and `def` handlers whose thread outlived its run
(each holds one of its slots until it returns). An operator asking why a job is not running saw
"no live worker" or a full queue, not the handler at fault. These columns carry both:

- `orphan_threads`: such threads now, written by every heartbeat;
- `loop_stalls`: event-loop stalls past the worker's threshold since it started;
- `loop_stall`: the latest one, `{started_at, blocked_s, ongoing, handler, job_ids, at}`,
  written by the worker's loop-watch thread when the stall is seen (`ongoing`) and when the
  loop turns again. It cannot wait for a heartbeat: the heartbeat runs on the stalled loop.

The checks bound what a worker may write (a count, one small object): adding columns with
constant defaults rewrites nothing.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-07 23:20
"""

from __future__ import annotations

from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE workers
    ADD COLUMN orphan_threads integer NOT NULL DEFAULT 0
        CONSTRAINT workers_orphan_threads_check CHECK (orphan_threads BETWEEN 0 AND 100000),
    ADD COLUMN loop_stalls integer NOT NULL DEFAULT 0
        CONSTRAINT workers_loop_stalls_check CHECK (loop_stalls >= 0),
    ADD COLUMN loop_stall jsonb
        CONSTRAINT workers_loop_stall_check CHECK (
            loop_stall IS NULL
            OR (jsonb_typeof(loop_stall) = 'object' AND octet_length(loop_stall::text) <= 4096));
COMMENT ON COLUMN workers.orphan_threads IS
    'handler threads still running after their run was recorded (each holds a slot); heartbeat';
COMMENT ON COLUMN workers.loop_stall IS
    'latest event-loop stall past the threshold: started_at, blocked_s, ongoing, handler, job_ids, at';
"""

DOWNGRADE = """
ALTER TABLE workers DROP COLUMN loop_stall, DROP COLUMN loop_stalls, DROP COLUMN orphan_threads;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
