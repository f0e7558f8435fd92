"""xmin_horizon_holders: one definition of who holds this database's xmin horizon back.

Three queries used to answer that question, each its own way: the claim's degraded-mode rule
(`job_claim_horizon_held`), the health probe behind /metrics and the dashboard
(`health_xmin_holder`) and the pressure benchmark's timeline (`bench_timeline_sample`). They
disagreed. The health probe counted every session of the server with a snapshot, so it could
name a report in another database that holds nothing here; the benchmark counted only this
database's sessions, so it missed another database's open xid, which does hold it (the claim's
own snapshot keeps that xid's rows: docs/DATABASE.md, "Claim position").

The view lists every holder once, with what it holds (`held_by`):

- `xid`: a session of any database that took a transaction id;
- `snapshot`: a session of this database with a snapshot and no xid (since PostgreSQL 14 other
  databases' snapshots do not hold this database's horizon);
- `standby`: a walsender reporting a standby's oldest snapshot (hot_standby_feedback without a
  slot), which holds every database's horizon;
- `prepared`: a prepared transaction of any database, which keeps its xid until committed.

`since` is when the hold began (the transaction's start, the prepare), `xmin_age_xids` how many
transactions ago its oldest xid is. Autovacuum workers are left out: a VACUUM shows a
backend_xmin for as long as it runs, but does not hold the horizon against itself, and its
ANALYZE holds it only briefly. The session that reads the view is left out too. A session of
another role shows no xact_start to a role without pg_read_all_stats: listed, with no `since`.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04 19:00
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE VIEW xmin_horizon_holders AS
SELECT a.pid, a.datname::text AS database, a.application_name, a.state::text AS state,
       CASE WHEN a.backend_xid IS NOT NULL THEN 'xid'
            WHEN a.backend_type = 'walsender' THEN 'standby'
            ELSE 'snapshot' END AS held_by,
       a.xact_start AS since,
       -- Another database's snapshot does not count, so its xmin does not either: only its xid.
       CASE WHEN a.datname = current_database() OR a.backend_type = 'walsender'
            THEN greatest(age(a.backend_xmin), age(a.backend_xid))
            ELSE age(a.backend_xid) END::bigint AS xmin_age_xids
FROM pg_stat_activity a
WHERE a.pid <> pg_backend_pid()
  AND a.backend_type <> 'autovacuum worker'
  AND (a.backend_xid IS NOT NULL
       OR (a.backend_xmin IS NOT NULL
           AND (a.datname = current_database() OR a.backend_type = 'walsender')))
UNION ALL
SELECT NULL, p.database::text, 'prepared transaction ' || p.gid, 'prepared', 'prepared',
       p.prepared, age(p.transaction)::bigint
FROM pg_prepared_xacts p;

COMMENT ON VIEW xmin_horizon_holders IS
    'Every session or prepared transaction that holds this database''s xmin horizon back '
    '(migration 0019).';
"""

DOWNGRADE = r"""
DROP VIEW xmin_horizon_holders;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
