"""The single-column limits of `jobs` become domains; the ready trigger reads the ring only to insert.

PostgreSQL compiles a table's CHECK constraints once per statement that writes the table
(`ExecRelCheck`: each constraint's stored text is parsed, planned and made executable again),
and for an UPDATE it checks every one of them, whatever columns the statement sets. `jobs` had
18. In a server-side loop of single-row statements (benchmarks/profile/statement_cost.py), an
insert took 106.7 µs before this migration and 72.9 µs after it, a one-row UPDATE 123.0 and
76.7 µs (docs/BENCHMARKS.md, "The checks' fixed cost"). A single enqueue is one such
statement, and so is every claim, start, completion and heartbeat at a small batch.

A domain keeps its constraint planned in the type cache of each session, and a statement checks
a domain only where it assigns a value to a column of that type. So 15 of the limits that read
one column move to domains, under the same constraint names (db/errors.py maps them to fields).
Three stay table CHECKs: the two that relate columns (`jobs_finished_iff_terminal`,
`jobs_lease_iff_held`; a domain sees one value), and `jobs_idempotency_key_check`, because the
partial unique index `jobs_idempotency_key` names that column in its predicate, and changing the
column's type would rebuild the index (a scan of `jobs` under ACCESS EXCLUSIVE).

Upgrading rewrites neither `jobs` nor its indexes: a column changes to a domain without
constraints in place (binary compatible), and the constraints are then added NOT VALID. Every
existing row passed the identical table CHECKs that this migration drops in the same
transaction, and every new value is checked (NOT VALID skips only the scan of existing rows).
Validating would scan `jobs` once per domain; `ALTER DOMAIN ... VALIDATE CONSTRAINT` can do it
later, online, if wanted.

Also: `jobs_ready_sync` read the ring's sequence before its branches (migration 0025), so claims
and completions, which insert no ready row, read it too. The read now sits inside the two
INSERTs that use it.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06 07:00
"""

from __future__ import annotations

import importlib
from typing import Final, NamedTuple

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

_RING_0025 = "jobyard.db.migrations.versions.2026_12_06_0300_0025_set_ring"


class _Limit(NamedTuple):
    domain: str
    base: str
    constraint: str
    check: str  # over VALUE
    columns: tuple[str, ...]


_LIMITS: Final = (
    _Limit("job_counter", "integer", "job_counter_check", "VALUE >= 0",
           ("attempt", "execution_seq", "lease_lost_count", "solo_deaths")),
    _Limit("job_handler", "text", "jobs_handler_check",
           "length(VALUE) >= 1 AND length(VALUE) <= 200", ("handler",)),
    _Limit("job_cancel_reason", "text", "jobs_cancel_reason_check", "length(VALUE) <= 1000",
           ("cancel_reason",)),
    _Limit("job_error", "text", "jobs_last_error_check", "length(VALUE) <= 8000", ("last_error",)),
    _Limit("job_max_attempts", "integer", "jobs_max_attempts_check",
           "VALUE >= 1 AND VALUE <= 100", ("max_attempts",)),
    _Limit("job_payload", "jsonb", "jobs_payload_size", "octet_length(VALUE::text) <= 65536",
           ("payload",)),
    _Limit("job_result", "jsonb", "jobs_result_size", "octet_length(VALUE::text) <= 65536",
           ("result",)),
    _Limit("job_priority", "integer", "jobs_priority_check", "VALUE >= -1000 AND VALUE <= 1000",
           ("priority",)),
    _Limit("job_progress", "real", "jobs_progress_range",
           "VALUE >= 0::double precision AND VALUE <= 1::double precision", ("progress",)),
    _Limit("job_progress_message", "text", "jobs_progress_message_length",
           "char_length(VALUE) <= 500", ("progress_message",)),
    _Limit("job_retry_override", "jsonb", "jobs_retry_override_check",
           "jsonb_typeof(VALUE) = 'object'", ("retry_override",)),
    _Limit("job_timeout_ms", "integer", "jobs_timeout_ms_check",
           "VALUE >= 1 AND VALUE <= 86400000", ("timeout_ms",)),
)  # fmt: skip

# The table CHECKs of migrations 0001, 0004 and 0005, as they were, for the downgrade.
_TABLE_CHECKS: Final = {
    "jobs_attempt_check": "attempt >= 0",
    "jobs_execution_seq_check": "execution_seq >= 0",
    "jobs_lease_lost_count_check": "lease_lost_count >= 0",
    "jobs_solo_deaths_check": "solo_deaths >= 0",
    "jobs_handler_check": "length(handler) >= 1 AND length(handler) <= 200",
    "jobs_cancel_reason_check": "cancel_reason IS NULL OR length(cancel_reason) <= 1000",
    "jobs_last_error_check": "last_error IS NULL OR length(last_error) <= 8000",
    "jobs_max_attempts_check": "max_attempts >= 1 AND max_attempts <= 100",
    "jobs_payload_size": "octet_length(payload::text) <= 65536",
    "jobs_result_size": "result IS NULL OR octet_length(result::text) <= 65536",
    "jobs_priority_check": "priority >= -1000 AND priority <= 1000",
    "jobs_progress_range": "progress >= 0::double precision AND progress <= 1::double precision",
    "jobs_progress_message_length": "char_length(progress_message) <= 500",
    "jobs_retry_override_check": (
        "retry_override IS NULL OR jsonb_typeof(retry_override) = 'object'"
    ),
    "jobs_timeout_ms_check": "timeout_ms IS NULL OR (timeout_ms >= 1 AND timeout_ms <= 86400000)",
}

_RING_READ = """    -- The ring's current partition (migration 0025): read without MVCC, so always the newest.
    SELECT (last_value % 3)::smallint INTO slot FROM job_ready_ring;
"""
_RING_NOTE = """    -- The ring's current partition (0025), read without MVCC, so always the newest; read in
    -- the INSERTs that use it (0026): a claim or a completion inserts no ready row.
"""
# A subquery without correlation: evaluated once per statement.
_SLOT = "(SELECT (last_value % 3)::smallint FROM job_ready_ring)"


def _ready_sync_0025() -> str:
    text: str = importlib.import_module(_RING_0025)._ready_sync()
    return text


def _ready_sync() -> str:
    old = _ready_sync_0025()
    assert _RING_READ in old and old.count("SELECT slot, n.id") == 2
    return (
        old.replace(_RING_READ, _RING_NOTE)
        .replace("DECLARE\n    slot smallint;\n", "")
        .replace("SELECT slot, n.id", f"SELECT {_SLOT},\n               n.id")
    )


def upgrade() -> None:
    op.execute("\n".join(f"CREATE DOMAIN {limit.domain} AS {limit.base};" for limit in _LIMITS))
    drops = [f"DROP CONSTRAINT {name}" for name in _TABLE_CHECKS]
    # Unconstrained domains over the same type: no rewrite, no scan.
    types = [f"ALTER COLUMN {c} TYPE {limit.domain}" for limit in _LIMITS for c in limit.columns]
    op.execute("ALTER TABLE jobs " + ", ".join(drops + types) + ";")
    op.execute(
        "\n".join(
            f"ALTER DOMAIN {limit.domain} ADD CONSTRAINT {limit.constraint} "
            f"CHECK ({limit.check}) NOT VALID;"
            for limit in _LIMITS
        )
    )
    op.execute(_ready_sync())


def downgrade() -> None:
    op.execute(_ready_sync_0025())
    types = [f"ALTER COLUMN {c} TYPE {limit.base}" for limit in _LIMITS for c in limit.columns]
    checks = [f"ADD CONSTRAINT {name} CHECK ({check})" for name, check in _TABLE_CHECKS.items()]
    op.execute("ALTER TABLE jobs " + ", ".join(types + checks) + ";")
    op.execute("\n".join(f"DROP DOMAIN {limit.domain};" for limit in _LIMITS))
