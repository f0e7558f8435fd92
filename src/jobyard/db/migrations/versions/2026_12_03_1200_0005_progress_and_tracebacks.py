"""A handler's progress on its job, and the full traceback of every failed run.

jobs.progress / progress_message / progress_at: the latest `ctx.progress(fraction, message)` of
the run in flight (fenced like every worker write). job_executions.traceback: the formatted
traceback of a run that raised, truncated in Python to MAX_TRACEBACK_LENGTH with a marker; the
CHECKs bound both whatever writes them. New nullable columns without defaults: catalog-only.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 12:00
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE jobs
    ADD COLUMN progress real,
    ADD COLUMN progress_message text,
    ADD COLUMN progress_at timestamptz,
    ADD CONSTRAINT jobs_progress_range CHECK (progress >= 0 AND progress <= 1),
    ADD CONSTRAINT jobs_progress_message_length CHECK (char_length(progress_message) <= 500);
ALTER TABLE job_executions
    ADD COLUMN traceback text,
    ADD CONSTRAINT job_executions_traceback_length CHECK (char_length(traceback) <= 16000);
"""

DOWNGRADE = r"""
ALTER TABLE job_executions DROP COLUMN traceback;
ALTER TABLE jobs DROP COLUMN progress_at, DROP COLUMN progress_message, DROP COLUMN progress;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
