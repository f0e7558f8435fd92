"""job_held_count: the limited claim's room count by an index-only scan that marks dead entries.

A claim on a limited queue counts the queue's rows in `job_held` under the queue's row lock
(migration 0022), so every claim of the queue waits for the count. The planner read each
partition with a bitmap scan of its queue index, and a bitmap scan never sets the `LP_DEAD` hint
on the index entries of dead rows: every count fetched the heap tuple of every row claimed and
finished since the partition was last truncated. Sampled during a limited 2-process drain:
6,000-27,000 dead entries per partition for 0-100 live rows, 0.6-2.5 ms a count, under the lock
(docs/BENCHMARKS.md, "Where a limited drain's time goes").

An index-only scan fetches the heap for the same entries (the partitions are never all-visible)
but marks each entry whose row is dead to every snapshot, and the next scan steps over it in the
index page: on 20,000 dead rows and 50 live ones, 149 buffers and 0.43 ms the second time by
bitmap, 19 buffers and 0.03 ms by index-only scan. `job_held_count` pins that plan: a PL/pgSQL
function (its statement's plan is cached across calls) whose two settings, bitmap and sequential
scans off, hold for the call only. Sequential scans too, because a plan made while a partition
is empty would read it sequentially and keep doing so as the partition fills.

Under a held xmin horizon nothing is dead to every snapshot and nothing is marked: the count
walks the partitions' rows as before, one heap fetch per entry where the bitmap scan read each
page once (1.6x slower with 51,000 such rows, docs/DATABASE.md); the rotation's TRUNCATE still
bounds them to the last few slot periods.

The function is VOLATILE so that its statement takes its snapshot after its locks, as the count
did when it was part of the claim's own statement (docs/DATABASE.md, "Why the count is safe
across a rotation").

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05 15:00
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION job_held_count(p_queue_id bigint) RETURNS bigint
-- VOLATILE, not STABLE: a STABLE function's statement runs on its caller's snapshot, taken
-- before this statement locks the partitions. A count that waited there for a rotation would
-- then read with a snapshot older than the rotation's move: the moved rows unseen, the emptied
-- partition empty, a claim over the limit (the cap race: 11 in flight for a cap of 8). VOLATILE
-- takes the statement's own snapshot once its locks are held.
LANGUAGE plpgsql VOLATILE
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
BEGIN
    RETURN (SELECT count(*) FROM job_held h WHERE h.queue_id = p_queue_id);
END $$;
COMMENT ON FUNCTION job_held_count(bigint) IS
    'Held jobs of a limited queue, by index-only scans that mark dead entries (migration 0023)';
"""

DOWNGRADE = r"""
DROP FUNCTION job_held_count(bigint);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
