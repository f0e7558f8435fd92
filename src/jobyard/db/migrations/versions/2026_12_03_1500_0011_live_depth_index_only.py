"""The live backlog counted from the index alone (issue 16 point 6).

`jobs_project_status_idx` (project_id, status, id DESC) gains `INCLUDE (queue_id, run_at)`: the
per-queue depth on the overview, queue, queues and topology pages, the JSON metrics and the
/metrics scrape (read_metrics_queues, read_prom_queues) count unfinished jobs per queue and the
oldest due time with an index-only scan instead of fetching every backlog row from the heap
(72 ms → 19 ms at 50,000 unfinished jobs of 1,000,000). Same index, same keys and order (the
explorer's status filter still walks it newest first), 16 more bytes per entry; no new index on
`jobs`. docs/BENCHMARKS.md has the enqueue cost measured in turns.

Revision ID: 0011
Revises: 0009
Create Date: 2026-12-03 15:00
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None

UPGRADE = r"""
DROP INDEX jobs_project_status_idx;
CREATE INDEX jobs_project_status_idx ON jobs (project_id, status, id DESC)
    INCLUDE (queue_id, run_at);
"""

DOWNGRADE = r"""
DROP INDEX jobs_project_status_idx;
CREATE INDEX jobs_project_status_idx ON jobs (project_id, status, id DESC);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
