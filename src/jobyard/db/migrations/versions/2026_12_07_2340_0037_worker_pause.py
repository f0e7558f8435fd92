"""An operator can pause one worker: it claims nothing until resumed, its running jobs go on.

Queues could be paused, workers could only be stopped from their own host (SIGTERM). Taking one
machine out of rotation — before maintenance, or a worker whose handlers misbehave — needed a
shell on it. `paused_at` is set and cleared from the API, the dashboard and the CLI; the worker
reads it from every heartbeat (`lease_extend` returns it), so a pause holds within one heartbeat
interval and survives nothing but a resume: a worker that re-registers starts unpaused, as a new
process would.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-07 23:40
"""

from __future__ import annotations

from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE workers ADD COLUMN paused_at timestamptz;
COMMENT ON COLUMN workers.paused_at IS
    'set by an operator: the worker claims nothing until cleared (read by its heartbeat)';
"""

DOWNGRADE = """
ALTER TABLE workers DROP COLUMN paused_at;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
