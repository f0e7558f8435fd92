"""Workers report the handler names they have registered, so "why isn't this job running?" can
say that no live worker knows a job's handler.

NULL means "not reported" (a worker of an older release): never read as "knows no handler".
The CHECK bounds the list as the database's own guard (a registry of 1,000 names is far beyond
any real worker; each name is bounded like jobs.handler).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 12:00
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE workers ADD COLUMN handlers text[],
            ADD CONSTRAINT workers_handlers_check
                CHECK (handlers IS NULL OR cardinality(handlers) <= 1000)
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE workers DROP CONSTRAINT workers_handlers_check, DROP COLUMN handlers")
