"""job_ready_after_idx: the claim order as one ascending key, so a claim can start past a position.

job_ready's dead rows are freed by TRUNCATE (0012), which needs ACCESS EXCLUSIVE. A session that
keeps a transaction open and reads the ready set (a REPEATABLE READ report counting the queue's
tables) holds ACCESS SHARE on every partition for as long as it lives, so the rotation gives up
every time, and with the xmin horizon held vacuum cannot help either: each claim walked an ever
longer dead prefix of job_ready_claim_idx (the active-readers cell of issue 15).

The claim order `priority DESC, run_at, job_id` mixes directions, so "after this row" is not one
range of job_ready_claim_idx. Indexed on `-priority` (priorities are CHECKed to ±1000, so the
negation cannot overflow), the same order is all ascending and `(-priority, run_at, job_id) >
(…)` is one row comparison the B-tree starts from: a worker that sees the rotation blocked
claims past the last row it claimed (`job_claim_batch_after`), plus a full claim every few
seconds for the rows that entered behind it (docs/DATABASE.md, "Claim position"). The normal
claim and its index are unchanged.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 18:00
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

UPGRADE = r"""
-- One per partition, named like the claim index so a plan says which partition it read; the
-- parent's index adopts them.
CREATE INDEX job_ready_0_after_idx ON job_ready_0 (queue_id, (- priority), run_at, job_id);
CREATE INDEX job_ready_1_after_idx ON job_ready_1 (queue_id, (- priority), run_at, job_id);
CREATE INDEX job_ready_2_after_idx ON job_ready_2 (queue_id, (- priority), run_at, job_id);
CREATE INDEX job_ready_after_idx ON job_ready (queue_id, (- priority), run_at, job_id);
"""

DOWNGRADE = r"""
DROP INDEX job_ready_after_idx;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
