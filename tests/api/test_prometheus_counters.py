"""/metrics counters, histograms and database-health gauges; the exposition passes promtool."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import httpx
import pytest
from fastapi import FastAPI

from jobyard.core import stats
from jobyard.db.pool import Conn, connect
from tests.api.conftest import Tenant
from tests.api.test_metrics import _samples, busy_project

__all__ = ["busy_project"]  # the fixture, imported for this module


@pytest.fixture(autouse=True)
def _public_metrics(app: FastAPI) -> None:
    """These tests read the scrape itself; who may scrape is tests/api/test_metrics.py's."""
    app.state.settings = app.state.settings.model_copy(update={"metrics_public": True})


def _key(tenant: Tenant, queue: str, **extra: str) -> tuple[tuple[str, str], ...]:
    labels = {"org": tenant.org_slug, "project": tenant.project_slug, "queue": queue, **extra}
    return tuple(sorted(labels.items()))


async def test_counters_and_histograms_come_from_the_rollup(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, busy_project: dict[str, int]
) -> None:
    await stats.fold(conn, lag_s=0)
    samples = _samples((await client.get("/metrics")).text)
    slow = _key(tenant_a, "slow")
    # 101 done jobs in `slow` (one two hours ago), each with one succeeded run.
    assert (
        samples[("jobyard_jobs_finished_total", _key(tenant_a, "slow", outcome="succeeded"))] == 101
    )
    assert samples[("jobyard_jobs_enqueued_total", slow)] == 101
    default = _key(tenant_a, "default")
    assert samples[("jobyard_jobs_retried_total", default)] == 1  # the failed run with a retry
    assert (
        samples[("jobyard_jobs_finished_total", _key(tenant_a, "default", outcome="failed"))] == 1
    )
    assert samples[("jobyard_job_run_seconds_count", slow)] == 101
    inf = _key(tenant_a, "slow", le="+Inf")
    assert samples[("jobyard_job_run_seconds_bucket", inf)] == 101
    # Runs took 1..100 ms (+ one of 99.999 s): 5 of them ≤ 5 ms.
    assert samples[("jobyard_job_run_seconds_bucket", _key(tenant_a, "slow", le="0.005"))] == 5
    assert samples[("jobyard_job_run_seconds_sum", slow)] == pytest.approx(
        (sum(range(1, 101)) + 99999) / 1000
    )


async def test_counters_never_go_down_when_jobs_are_deleted(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, busy_project: dict[str, int]
) -> None:
    await stats.fold(conn, lag_s=0)
    await conn.execute("DELETE FROM jobs WHERE status = 'done'")
    await stats.fold(conn, lag_s=0)
    samples = _samples((await client.get("/metrics")).text)
    key = _key(tenant_a, "slow", outcome="succeeded")
    assert samples[("jobyard_jobs_finished_total", key)] == 101


# Reads who holds the horizon, which another test's xid of any database would change.
@pytest.mark.xdist_group("horizon")
async def test_health_gauges_show_a_held_xmin_and_dead_tuples(
    client: httpx.AsyncClient, conn: Conn, db_url: str, busy_project: dict[str, int]
) -> None:
    holder = await connect(db_url)  # not autocommit: the transaction stays open
    try:
        await holder.execute("SELECT txid_current()")
        await asyncio.sleep(1.1)
        samples = _samples((await client.get("/metrics")).text)
        assert samples[("jobyard_db_oldest_xmin_age_seconds", ())] >= 1.0
        assert samples[("jobyard_db_oldest_xmin_age_transactions", ())] >= 0
        assert samples[("jobyard_db_xmin_horizon_holders", (("held_by", "xid"),))] >= 1
        # Every kind keeps its series at 0, so a graph of it does not break off.
        assert ("jobyard_db_xmin_horizon_holders", (("held_by", "prepared"),)) in samples
    finally:
        await holder.rollback()
        await holder.close()
    assert ("jobyard_db_dead_tuple_ratio", (("relation", "jobs"),)) in samples


# Reads who holds the horizon, which another test's xid of any database would change.
@pytest.mark.xdist_group("horizon")
async def test_health_warnings_pass_their_thresholds_in_metrics(
    client: httpx.AsyncClient, app: FastAPI, conn: Conn, db_url: str, busy_project: dict[str, int]
) -> None:
    """Issue 15 point 6: a held XID past a small threshold, and a ready-queue table (any
    `job_ready*` name, listed without configuration) with most of its rows dead."""
    app.state.settings = app.state.settings.model_copy(
        update={"health_xmin_warn_s": 1.0, "health_dead_ratio_warn": 0.1}
    )
    # Autovacuum off on these tables: a vacuum between the DELETE and the scrape removed the dead
    # rows it is meant to count (a fresh-clone CI run read a ratio of 0.0).
    await conn.execute("CREATE TABLE job_ready_p7 (id bigint) WITH (autovacuum_enabled = false)")
    await conn.execute("INSERT INTO job_ready_p7 SELECT g FROM generate_series(1, 90000) g")
    await conn.execute("DELETE FROM job_ready_p7 WHERE id <= 60000")  # 60,000 of 90,000 dead
    # A ready partition between two rotations: mostly dead by design, below the ready tables'
    # own floor (db_health.READY_MIN_DEAD_TO_WARN), so no warning.
    await conn.execute("CREATE TABLE job_ready_p8 (id bigint) WITH (autovacuum_enabled = false)")
    await conn.execute("INSERT INTO job_ready_p8 SELECT g FROM generate_series(1, 5000) g")
    await conn.execute("DELETE FROM job_ready_p8 WHERE id <= 4000")
    # A quiet ready table (no dead rows) is listed too: hot relations are never cut by the limit.
    await conn.execute("CREATE TABLE job_ready_zz (id bigint) WITH (autovacuum_enabled = false)")
    await conn.execute("INSERT INTO job_ready_zz SELECT g FROM generate_series(1, 10) g")
    await conn.execute("SELECT pg_stat_force_next_flush()")
    ready = (("relation", "job_ready_p7"),)
    # The horizon is the server's: another test's transaction, in any database, may hold it past
    # the 1-s threshold for a moment (a fresh-clone CI run read 1 here). Wait for a quiet scrape.
    for _ in range(60):
        before = _samples((await client.get("/metrics")).text)
        if before[("jobyard_db_oldest_xmin_warning", ())] == 0:
            break
        await asyncio.sleep(0.5)
    assert before[("jobyard_db_oldest_xmin_warning", ())] == 0
    holder = await connect(db_url)  # not autocommit: the transaction stays open
    try:
        await holder.execute("SELECT txid_current()")
        await asyncio.sleep(1.5)
        samples = _samples((await client.get("/metrics")).text)
    finally:
        await holder.rollback()
        await holder.close()
    assert samples[("jobyard_db_oldest_xmin_warning", ())] == 1
    assert samples[("jobyard_db_oldest_xmin_age_seconds", ())] > 1.0
    assert samples[("jobyard_db_dead_tuple_ratio", ready)] == pytest.approx(2 / 3, abs=0.05)
    assert samples[("jobyard_db_dead_tuple_warning", ready)] == 1
    assert samples[("jobyard_db_dead_tuple_warning", (("relation", "job_ready_p8"),))] == 0
    assert samples[("jobyard_db_dead_tuple_warning", (("relation", "jobs"),))] == 0
    assert samples[("jobyard_db_dead_tuple_ratio", (("relation", "job_ready_zz"),))] == 0


async def test_promtool_check_metrics_is_clean(
    client: httpx.AsyncClient, conn: Conn, busy_project: dict[str, int]
) -> None:
    assert shutil.which("promtool"), "promtool is missing: `make promtool` installs it"
    await stats.fold(conn, lag_s=0)
    text = (await client.get("/metrics")).text
    assert "jobyard_job_wait_seconds_bucket" in text
    checked = await asyncio.to_thread(
        subprocess.run,
        ["promtool", "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "" and checked.stderr.strip() == "", checked
