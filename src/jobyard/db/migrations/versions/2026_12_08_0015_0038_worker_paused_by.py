"""Who paused a worker, so the next operator does not have to ask around.

A paused worker claims nothing until someone resumes it; without a name on the pause, whoever
finds it paused cannot tell a maintenance window from a forgotten click. `paused_by` holds the
first pauser as the API, the dashboard or the CLI names them (an account's email, `api key #7`,
`alice@build-3 (cli)`), cleared with the pause.

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-08 00:15
"""

from __future__ import annotations

from alembic import op

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE workers ADD COLUMN paused_by text
    CONSTRAINT workers_paused_by_check CHECK (length(paused_by) BETWEEN 1 AND 200);
"""

DOWNGRADE = """
ALTER TABLE workers DROP COLUMN paused_by;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
