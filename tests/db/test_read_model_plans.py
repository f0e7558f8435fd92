"""EXPLAIN guards for the dashboard's and the API's read models (issue 16 point 6).

Built on the dashboard benchmark's data set (set-based SQL, shrunk to 20,000 jobs and 40,000
runs) and ANALYZEd. Each read-model query is planned with sequential scans disabled: if a plan
still scans `jobs`, `job_executions`, `job_logs` or `dead_letter_jobs` sequentially, no index
can serve it and its cost grows with the history — at 1,000,000 jobs that is the page that
misses its 200 ms (docs/BENCHMARKS.md, "Dashboard at 1,000,000 jobs"). Plans, never timings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jobyard.benchmarks import dashboard
from jobyard.db.pool import connect_sync
from jobyard.db.queries import sql
from jobyard.domain.stats import BOUNDS_MS

pytestmark = pytest.mark.xdist_group("explain")

BIG_TABLES = ("jobs", "job_executions", "job_logs", "dead_letter_jobs")
SIZE = dashboard.Size(jobs=20_000, executions=40_000, logs_for=2_000)


@pytest.fixture(scope="module")
def built(pg_admin_url: str, pg_template: str) -> Iterator[tuple[str, dict[str, Any]]]:
    from jobyard.db import testing

    url = testing.create_clone(pg_admin_url, pg_template)
    try:
        sample, _, _ = dashboard.build(url, SIZE, lambda _: None)
        _all_visible(url, "jobs")
        yield url, sample
    finally:
        testing.drop_database(pg_admin_url, url)


def _all_visible(url: str, table: str, tries: int = 50) -> None:
    """VACUUM until the visibility map covers the table, as autovacuum would in time. The build's
    own VACUUM can leave it short: an autovacuum ANALYZE running in this database at that moment
    holds back the horizon, and with few pages all-visible the planner prefers a bitmap scan to
    the index-only scan these plans are about (a flake seen in CI under load)."""
    with connect_sync(url, autocommit=True) as conn:
        for _ in range(tries):
            conn.execute(f"VACUUM {table}")
            row = conn.execute(
                "SELECT relpages, relallvisible FROM pg_class WHERE oid = %s::regclass", (table,)
            ).fetchone()
            assert row is not None
            if row["relallvisible"] >= 0.95 * row["relpages"]:
                return
            time.sleep(0.1)


def _cases(s: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    p, q, w, j = s["project_id"], s["queue_id"], s["worker_id"], s["job_id"]
    page: dict[str, Any] = {
        "project_id": p, "before_id": None, "statuses": None, "queue": None, "handler": None,
        "created_from": None, "created_to": None, "min_id": None, "max_id": None,
        "fingerprint": None, "limit": 51,
    }  # fmt: skip
    day = {"created_from": "2026-01-01T00:00:00Z", "created_to": "2026-01-02T00:00:00Z"}
    base = {"project_id": p, "now": None}
    return [
        ("jobs, no filter", "read_jobs_page", page),
        ("jobs by status", "read_jobs_page", {**page, "statuses": ["dead_letter"]}),
        ("jobs by queue", "read_jobs_page", {**page, "queue": "default"}),
        ("jobs by handler", "read_jobs_page", {**page, "handler": "charge_card"}),
        ("jobs by fingerprint", "read_jobs_page", {**page, "fingerprint": "x" * 32}),
        ("jobs, next page", "read_jobs_page", {**page, "before_id": j}),
        ("jobs created in a window", "read_jobs_page",
         {**page, **day, "min_id": j - 1000, "max_id": j}),
        ("id of a created_at", "read_job_id_at", {"at": "2026-01-01T00:00:00Z"}),
        ("job", "read_job_get", {"project_id": p, "job_id": j}),
        ("job run summary", "read_job_execution_summary", {"project_id": p, "job_id": j}),
        ("job runs", "read_job_executions_page",
         {"project_id": p, "job_id": j, "after_seq": None, "limit": 51}),
        ("job logs", "read_job_logs_page",
         {"project_id": p, "job_id": j, "after_id": None, "execution_seq": None, "limit": 101}),
        ("workers", "read_workers_page",
         {"project_id": p, "before_id": None, "statuses": None, "limit": 51}),
        ("worker", "read_worker_detail", {**base, "worker_id": w}),
        ("worker's held jobs", "read_worker_held_jobs",
         {"project_id": p, "worker_id": w, "held_shown": 100}),
        ("worker's recent runs", "read_worker_recent_runs",
         {"project_id": p, "worker_id": w, "limit": 20}),
        ("topology workers", "read_topology_workers", {**base, "limit": 40}),
        ("dead letters", "read_dlq_page",
         {"project_id": p, "before_id": None, "queue": None, "fingerprint": None, "replayed": None,
          "limit": 51}),
        ("dead letters' payloads", "read_dlq_payloads", {"project_id": p, "ids": [1, 2, 3]}),
        ("queue depths", "read_metrics_queues", base),
        ("worker totals", "read_metrics_workers", base),
        ("prometheus queues", "read_prom_queues", {"now": None}),
        ("prometheus workers", "read_prom_workers", {"now": None}),
        ("chart 1 h", "stats_series",
         {**base, "queue_id": q, "range_s": 3600, "step_s": 60, "hourly": False}),
        ("chart 7 d", "stats_series",
         {**base, "queue_id": None, "range_s": 604800, "step_s": 7200, "hourly": True}),
        ("fold", "stats_fold_executions",
         {"now": None, "batch": 1000, "lag_s": 2.0, "bounds": list(BOUNDS_MS)}),
    ]  # fmt: skip


def _scans(plan: dict[str, Any]) -> Iterator[tuple[str, str]]:
    yield plan.get("Node Type", ""), plan.get("Relation Name", "")
    for child in plan.get("Plans", []):
        yield from _scans(child)


CASES = [c[0] for c in _cases({"project_id": 0, "queue_id": 0, "worker_id": 0, "job_id": 0})]


@pytest.mark.parametrize("case", CASES)
def test_no_read_model_scans_a_big_table_sequentially(
    built: tuple[str, dict[str, Any]], case: str
) -> None:
    url, sample = built
    name, params = next((n, p) for c, n, p in _cases(sample) if c == case)
    with connect_sync(url) as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        row = conn.execute("EXPLAIN (FORMAT JSON) " + sql(name), params).fetchone()  # type: ignore[operator]
        assert row is not None
    plan = row["QUERY PLAN"]
    if isinstance(plan, str):
        plan = json.loads(plan)
    seq = [rel for node, rel in _scans(plan[0]["Plan"]) if node == "Seq Scan" and rel in BIG_TABLES]
    assert seq == [], f"{name} ({case}) scans {seq} sequentially"


def test_charts_never_read_jobs(built: tuple[str, dict[str, Any]]) -> None:
    url, sample = built
    params = {"project_id": sample["project_id"], "now": None, "queue_id": None,
              "range_s": 604800, "step_s": 7200, "hourly": True}  # fmt: skip
    with connect_sync(url) as conn:
        row = conn.execute("EXPLAIN (FORMAT JSON) " + sql("stats_series"), params).fetchone()  # type: ignore[operator]
    assert row is not None
    relations = {rel for _, rel in _scans(row["QUERY PLAN"][0]["Plan"]) if rel}
    assert relations <= {"queue_stats", "queue_stats_hourly", "queues"}, relations


def _plan(url: str, name: str, params: dict[str, Any]) -> dict[str, Any]:
    with connect_sync(url) as conn:
        row = conn.execute("EXPLAIN (FORMAT JSON) " + sql(name), params).fetchone()  # type: ignore[operator]
    assert row is not None
    plan: dict[str, Any] = row["QUERY PLAN"][0]["Plan"]
    return plan


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_live_depth_counts_the_backlog_from_the_index_alone(
    built: tuple[str, dict[str, Any]],
) -> None:
    """The overview's, queue pages' and /metrics' per-queue depth reads jobs_project_group_idx
    only (its INCLUDE columns, migration 0011; waiting and scheduled, migration 0030), and jobs
    by key for the held set's statuses: never the finished history, never the queued backlog
    (counted from job_ready)."""
    url, sample = built
    for name, params in (
        ("read_metrics_queues", {"project_id": sample["project_id"], "now": None}),
        ("read_prom_queues", {"now": None}),
    ):
        jobs = [n for n in _nodes(_plan(url, name, params)) if n.get("Relation Name") == "jobs"]
        shapes = {(n["Node Type"], n.get("Index Name")) for n in jobs}
        assert ("Index Only Scan", "jobs_project_group_idx") in shapes, (name, shapes)
        assert shapes <= {
            ("Index Only Scan", "jobs_project_group_idx"),
            ("Index Scan", "jobs_pkey"),
        }, (name, shapes)
        # The queued backlog is counted from the ready set.
        plan = _nodes(_plan(url, name, params))
        assert any("job_ready" in n.get("Relation Name", "") for n in plan), name


def test_a_created_window_reads_only_its_id_range(built: tuple[str, dict[str, Any]]) -> None:
    """created_at bounds become id bounds (read_job_id_at bisects the primary key): the
    explorer's window scan is an index range on ids, and the bisection probes the primary key."""
    url, sample = built
    p, j = sample["project_id"], sample["job_id"]
    params = {
        "project_id": p, "before_id": None, "statuses": None, "queue": None, "handler": None,
        "created_from": "2026-01-01T00:00:00Z", "created_to": "2026-01-02T00:00:00Z",
        "min_id": j - 1000, "max_id": j, "fingerprint": None, "limit": 51,
    }  # fmt: skip
    scans = [
        n for n in _nodes(_plan(url, "read_jobs_page", params)) if n.get("Relation Name") == "jobs"
    ]
    assert len(scans) == 1 and scans[0]["Node Type"] == "Index Scan", scans
    assert "id >=" in scans[0].get("Index Cond", ""), scans[0]
    probes = [
        n
        for n in _nodes(_plan(url, "read_job_id_at", {"at": "2026-01-01T00:00:00Z"}))
        if n.get("Relation Name") == "jobs"
    ]
    assert probes and all(n["Node Type"] in {"Index Scan", "Index Only Scan"} for n in probes), [
        (n["Node Type"], n.get("Index Name")) for n in probes
    ]


def test_id_bounds_keep_exactly_the_jobs_of_a_created_window(
    built: tuple[str, dict[str, Any]],
) -> None:
    """The bisection's id bounds (with read_models' slack) select the same jobs as the
    created_at test alone: a three-hour window from the middle of the week."""
    from datetime import timedelta

    from jobyard.core.read_models import CREATED_ID_SLACK

    url, sample = built
    with connect_sync(url) as conn:
        mid = conn.execute("SELECT created_at FROM jobs WHERE id = %s", (sample["job_id"],))
        row = mid.fetchone()
        assert row is not None
        start, end = row["created_at"], row["created_at"] + timedelta(hours=3)

        def id_at(at: Any) -> int:
            got = conn.execute(sql("read_job_id_at"), {"at": at}).fetchone()
            assert got is not None
            return int(got["id"])

        params = {
            "project_id": sample["project_id"], "before_id": None, "statuses": None,
            "queue": None, "handler": None, "created_from": start, "created_to": end,
            "fingerprint": None, "limit": 500,
        }  # fmt: skip
        exact = conn.execute(sql("read_jobs_page"), {**params, "min_id": None, "max_id": None})
        bounded = conn.execute(
            sql("read_jobs_page"),
            {
                **params,
                "min_id": id_at(start - CREATED_ID_SLACK),
                "max_id": id_at(end + CREATED_ID_SLACK),
            },
        )
        want = [r["id"] for r in exact.fetchall()]
        got = [r["id"] for r in bounded.fetchall()]
        # The first job created at `start` is the bound itself when no slack is needed.
        assert id_at(start) == min(want)
    assert 50 < len(want) < 500
    assert got == want
