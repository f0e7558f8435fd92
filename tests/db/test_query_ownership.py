"""Each state-changing query has one owning module (STYLE rule 2): processes call core
functions, never the queries. Read-only queries (read_*) may be used by any reader."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from jobyard.db.queries import QUERIES

SRC = Path(__file__).resolve().parents[2] / "src" / "jobyard"

# Name prefix → the only modules allowed to run queries with it (longest prefix wins).
OWNERS: dict[str, frozenset[str]] = {
    "job_claim_": frozenset({"core/claim.py"}),
    "job_insert": frozenset({"core/enqueue.py"}),
    "job_lock_parents": frozenset({"core/enqueue.py"}),
    "workflow_": frozenset({"core/workflows.py"}),
    "batch_": frozenset({"core/workflows.py"}),
    "job_get_by_idempotency_key": frozenset({"core/enqueue.py"}),
    "job_promote_due": frozenset({"core/maintenance.py"}),
    "job_": frozenset({"core/transitions.py"}),
    "lease_reap": frozenset({"core/maintenance.py"}),
    "lease_": frozenset({"core/lease.py"}),
    "worker_sweep_dead": frozenset({"core/maintenance.py"}),
    "worker_": frozenset({"core/workers.py"}),
    "schedule_": frozenset({"core/schedules.py"}),
    "retention_": frozenset({"core/maintenance.py"}),
    "dlq_": frozenset({"core/dlq.py"}),
    "queue_ensure": frozenset({"core/projects.py"}),
    "queue_list_by_names": frozenset({"core/claim.py"}),
    "queue_get_by_name": frozenset({"core/enqueue.py"}),
    "queue_": frozenset({"core/admin.py"}),
    "policy_": frozenset({"core/admin.py"}),
    "project_": frozenset({"core/projects.py"}),
    "auth_": frozenset({"core/auth.py"}),
    "ratelimit_": frozenset({"core/ratelimit.py"}),
    "tenancy_": frozenset({"core/tenancy.py"}),
    "invitation_": frozenset({"core/invitations.py"}),
    "seed_": frozenset({"db/seed.py"}),
    "clock_": frozenset({"core/enqueue.py", "core/maintenance.py"}),
    "action_": frozenset({"core/actions.py"}),
    "why_": frozenset({"core/why.py"}),
    "failure_": frozenset({"core/failures.py", "core/actions.py"}),
    "stats_": frozenset({"core/stats.py"}),
    "live_": frozenset({"core/live.py"}),
    "dash_": frozenset({"benchmarks/dashboard.py"}),
}
READ_PREFIXES = ("read_", "bench_", "health_")


def _uses() -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    pattern = re.compile(r"[\"']([a-z][a-z0-9_]*)[\"']")
    # An OpenAPI operation id (`operation_id="dlq_replay"`) may share a query's name.
    operation_ids = re.compile(r"operation_id=[\"'][a-z0-9_]*[\"']")
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        text = operation_ids.sub("", path.read_text(encoding="utf-8"))
        for name in pattern.findall(text):
            if name in QUERIES:
                found[name].add(rel)
    return found


def _owner(name: str) -> frozenset[str] | None:
    matches = [prefix for prefix in OWNERS if name.startswith(prefix)]
    return OWNERS[max(matches, key=len)] if matches else None


def test_every_query_name_has_an_owner_or_is_a_read() -> None:
    orphans = [n for n in QUERIES if _owner(n) is None and not n.startswith(READ_PREFIXES)]
    assert orphans == []


def test_state_changing_queries_are_used_only_by_their_owning_module() -> None:
    # The EXPLAIN harness may plan any query; it never runs them for real.
    tolerated = {"db/explain.py"}
    trespass = {
        name: sorted(modules - owner - tolerated)
        for name, modules in _uses().items()
        if (owner := _owner(name)) is not None and modules - owner - tolerated
    }
    assert trespass == {}


def test_read_queries_stay_out_of_the_engine_write_paths() -> None:
    writers = {"core/claim.py", "core/transitions.py", "core/lease.py"}
    leaked = {
        n: sorted(m & writers) for n, m in _uses().items() if n.startswith("read_") and m & writers
    }
    assert leaked == {}


def test_job_insert_ref_is_job_insert_but_for_what_it_sends_back() -> None:
    """The SDK's narrow insert is a twin of the API's; nothing but the final SELECT may drift."""

    def body(name: str) -> str:
        # Without comments: each twin's describes itself.
        lines = QUERIES[name].sql.splitlines()
        return "\n".join(line for line in lines if not line.lstrip().startswith("--"))

    whole, ref = body("job_insert"), body("job_insert_ref")
    assert ref.replace("SELECT inserted.id, inserted.status,", "SELECT inserted.*,") == whole
