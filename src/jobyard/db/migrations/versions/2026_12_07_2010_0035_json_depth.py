"""A JSON value that a job carries is at most 100 levels deep.

The API and the dashboard write a job's payload and result back out through pydantic, whose
serializer stops at about 254 levels (`Maximum serialization depth exceeded`). A payload 900
levels deep was accepted, stored, and then answered with a 500: the job existed, the client
was told it failed (and might enqueue it again), and every later read of it failed the same
way. So a payload or result may nest arrays and objects at most 100 levels deep (MongoDB's
limit for a document, far beyond any payload seen in practice): Python refuses a deeper one
with a 422 or `InvalidResult` naming the limit, and these constraints refuse it in the database
too.

`$.**{101}` finds any item 101 levels below the top; the check costs ~0.7 µs a value (EXPLAIN
harness: 0.6 µs for a one-key object, measured beside the size check). On `jobs` the limits are
domain constraints (migration 0026: checked only where a statement assigns the column, so a
claim or completion without a result pays nothing); on `scheduled_jobs` and `dead_letter_jobs`
table CHECKs. All are added NOT VALID: no scan of existing rows, every new value is checked.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07 20:10
"""

from __future__ import annotations

from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None

# strict: lax mode unwraps arrays on the way, which would count levels differently.
_WITHIN = "NOT jsonb_path_exists({}, 'strict $.**{{101}}')"

UPGRADE = f"""
ALTER DOMAIN job_payload ADD CONSTRAINT jobs_payload_depth
    CHECK ({_WITHIN.format("VALUE")}) NOT VALID;
ALTER DOMAIN job_result ADD CONSTRAINT jobs_result_depth
    CHECK ({_WITHIN.format("VALUE")}) NOT VALID;
ALTER TABLE scheduled_jobs ADD CONSTRAINT scheduled_jobs_payload_depth
    CHECK ({_WITHIN.format("payload")}) NOT VALID;
ALTER TABLE dead_letter_jobs ADD CONSTRAINT dead_letter_jobs_payload_depth
    CHECK ({_WITHIN.format("payload")}) NOT VALID;
"""

DOWNGRADE = """
ALTER TABLE dead_letter_jobs DROP CONSTRAINT dead_letter_jobs_payload_depth;
ALTER TABLE scheduled_jobs DROP CONSTRAINT scheduled_jobs_payload_depth;
ALTER DOMAIN job_result DROP CONSTRAINT jobs_result_depth;
ALTER DOMAIN job_payload DROP CONSTRAINT jobs_payload_depth;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
