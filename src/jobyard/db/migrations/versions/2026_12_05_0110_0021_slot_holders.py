"""xmin_horizon_holders lists the physical replication slots that hold the horizon.

A standby with `hot_standby_feedback` and a replication slot reports its oldest snapshot to the
slot, not to its walsender, so the view of migration 0019 missed it. Worse, the slot keeps that
`xmin` after the standby is gone: a standby that was decommissioned, or that has been down since
last night, holds every database's horizon on the primary until someone drops its slot. Vacuum
cannot remove a row that died since, the hot tables bloat, and nothing in the view said why.

The view now has a fifth kind, `slot`: one row per replication slot with an `xmin`, named
`replication slot <name>`, with `state` 'active' (its standby is connected: `pid` is its
walsender) or 'inactive' (nobody is: `pid` is NULL). `since` is when the slot went inactive, the
column `inactive_since` of PostgreSQL 17 and later; an active slot, and any slot on 15 and 16,
has no `since`. It is read through `to_jsonb`, so one view text serves every supported version.
A logical slot's `catalog_xmin` is left out: it holds the system catalogs only, not jobyard's
tables.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05 01:10
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_HOLDERS = "jobyard.db.migrations.versions.2026_12_04_1900_0019_xmin_horizon_holders"
_END = "FROM pg_prepared_xacts p;\n"
_SLOTS = """FROM pg_prepared_xacts p
UNION ALL
-- A physical slot's xmin holds every database's horizon, and outlives the standby that set it.
-- A slot's name is of type name, collated "C": the view's column keeps the default collation.
SELECT s.active_pid, NULL, ('replication slot ' || s.slot_name) COLLATE "default",
       CASE WHEN s.active THEN 'active' ELSE 'inactive' END, 'slot',
       -- inactive_since exists from PostgreSQL 17 on; to_jsonb reads it as NULL before that.
       (to_jsonb(s) ->> 'inactive_since')::timestamptz, age(s.xmin)::bigint
FROM pg_replication_slots s
WHERE s.xmin IS NOT NULL;
"""
_COMMENT = (
    "'Every session, prepared transaction or replication slot that holds this database''s xmin '\n"
    "    'horizon back (migrations 0019, 0021).';\n"
)


def _view(with_slots: bool) -> str:
    """0019's view as a CREATE OR REPLACE, with or without the slots' branch."""
    body: str = importlib.import_module(_HOLDERS).UPGRADE
    assert body.count("CREATE VIEW") == 1 and body.count(_END) == 1
    body = body.replace("CREATE VIEW", "CREATE OR REPLACE VIEW")
    if not with_slots:
        return body
    head, _, _ = body.partition("COMMENT ON VIEW")
    return head.replace(_END, _SLOTS) + "COMMENT ON VIEW xmin_horizon_holders IS\n    " + _COMMENT


def upgrade() -> None:
    op.execute(_view(with_slots=True))


def downgrade() -> None:
    # Same columns both ways, so CREATE OR REPLACE swaps the query in place.
    op.execute(_view(with_slots=False))
