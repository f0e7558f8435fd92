"""job_ready_rotate asks who holds the partition before it counts the partition's rows.

Since 0015 the rotation counts the live rows of the partition it would empty (at most 2,001,
to answer 'crowded' rather than copy a backlog), and since 0017 it then looks in `pg_locks` for
a long transaction holding that partition (answering 'locked'). In that order, a REPEATABLE READ
reader that pins the ready set (the active-readers cell of issue 15) made every call count first:
the pinned partition cannot be truncated, its claimed rows are dead but not removable, and a count
that stops at 2,001 *live* rows walked all of them. In a ten-minute readers run the partitions
held about 100,000 dead rows each after six minutes, and the counts (an index-only scan of
`job_ready_N_job_idx` with a heap check per entry) read about 220,000 index entries a second,
growing with the hold, inside the claim loop of each worker and the promoter's pass.

The holder check reads `pg_locks` and `pg_stat_activity` (a few dozen rows whatever the
partition holds), so it now comes first: a pinned partition answers 'locked' without being
read. The rest is unchanged: an empty partition answers 'clean' before either check, a
backlog 'crowded', and the advisory lock, the exclusive lock, the move and the TRUNCATE follow.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04 22:30
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# 0017's function (count, advisory lock, holder check, exclusive lock), which this reorders.
_NOT_BEHIND_READERS = (
    "jobyard.db.migrations.versions.2026_12_03_2100_0017_rotate_not_behind_readers"
)

_DROP = "DROP FUNCTION job_ready_rotate(integer);\n"
_COUNT = "    -- A backlog: copying it under the exclusive lock would stall every claim."
_FIRST = """    -- Asked before the count below (migration 0020): a long transaction holding the partition
    -- also keeps every dead row of it, and a count that stops at 2,001 live rows walks them all.
"""


def _in_place(body: str) -> str:
    """0017's statement as a CREATE OR REPLACE of the same signature."""
    assert body.count(_DROP) == 1
    return body.replace(_DROP, "").replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")


def _reordered() -> str:
    """0017's function with its holder check moved before the count."""
    module = importlib.import_module(_NOT_BEHIND_READERS)
    body, check = _in_place(module._rewritten()), module._CHECK
    assert body.count(check) == 1 and body.count(_COUNT) == 1
    return body.replace(check, "").replace(_COUNT, _FIRST + check + _COUNT)


def upgrade() -> None:
    op.execute(_reordered())


def downgrade() -> None:
    op.execute(_in_place(importlib.import_module(_NOT_BEHIND_READERS)._rewritten()))
