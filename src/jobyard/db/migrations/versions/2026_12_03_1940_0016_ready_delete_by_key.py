"""jobs_ready_sync deletes ready rows through their job_id index, never by a hash join.

The claim's statement trigger removes the claimed jobs' ready rows with `DELETE FROM job_ready r
USING new_jobs n WHERE r.job_id = n.id …`. With a backlog in the ready set (a burn-down, a
drain of 100,000 queued jobs) the planner chose a hash join: a sequential scan of the whole
partition for every claim. `auto_explain` in a quiet 2-process drain (docs/BENCHMARKS.md) showed
5.9 ms of the claim's 8.2 ms there, 935 buffers to delete 100 rows.

The ids to delete are now collected first and matched with `= ANY (ARRAY(…))`, as the promoter
does: an array cannot be hashed against, so each partition is probed through
`job_ready_N_job_idx`, whatever the statistics say. Same rows deleted; the DELETE branch of the
trigger (jobs deleted while queued) is written the same way.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03 19:40
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# 0012's function, which this rewrites two statements of (and the downgrade restores).
_READY = "jobyard.db.migrations.versions.2026_12_03_1500_0012_job_ready"

_OLD_LEFT = """        DELETE FROM job_ready r USING new_jobs n
        WHERE r.job_id = n.id AND n.status <> 'queued';"""
_NEW_LEFT = """        -- = ANY (ARRAY(...)): probed through job_ready_N_job_idx, never a hash join over a
        -- partition that holds a backlog (migration 0016).
        DELETE FROM job_ready r
        WHERE r.job_id = ANY (ARRAY(SELECT n.id FROM new_jobs n WHERE n.status <> 'queued'));"""
_OLD_GONE = """        DELETE FROM job_ready r USING gone g
        WHERE r.job_id = g.id AND g.status = 'queued';"""
_NEW_GONE = """        DELETE FROM job_ready r
        WHERE r.job_id = ANY (ARRAY(SELECT g.id FROM gone g WHERE g.status = 'queued'));"""


def _sync_of_0012() -> str:
    """0012's CREATE FUNCTION jobs_ready_sync statement, as OR REPLACE."""
    text: str = importlib.import_module(_READY).UPGRADE
    start = text.index("CREATE FUNCTION jobs_ready_sync()")
    end = text.index("END $$;", start) + len("END $$;")
    return text[start:end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def _rewritten() -> str:
    body = _sync_of_0012()
    assert _OLD_LEFT in body and _OLD_GONE in body
    return body.replace(_OLD_LEFT, _NEW_LEFT).replace(_OLD_GONE, _NEW_GONE)


def upgrade() -> None:
    op.execute(_rewritten())


def downgrade() -> None:
    op.execute(_sync_of_0012())
