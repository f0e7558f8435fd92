"""Metrics over the real app: the per-project JSON and the Prometheus scrape at /metrics."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from jobyard.core import stats
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.stats import BOUNDS_MS, SLOTS, percentile
from tests.api.conftest import Tenant
from tests.api.engine_helpers import base, claim_one, error_of, make_queue, owner, scalar


def percentile_cont(values: list[float], fraction: float) -> float:
    """PostgreSQL's percentile_cont: linear interpolation between the closest ranks."""
    ordered = sorted(values)
    pos = fraction * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


async def _add_jobs(
    conn: Conn, project_id: int, queue_id: int, status: str, n: int, **kw: Any
) -> None:
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, run_at)
           SELECT %(p)s, %(q)s, 'h', %(s)s::job_status, now() + %(offset)s * interval '1 s'
           FROM generate_series(1, %(n)s)""",
        {"p": project_id, "q": queue_id, "s": status, "n": n, "offset": kw.get("offset_s", 0)},
    )


async def _add_finished_runs(conn: Conn, project_id: int, queue_id: int) -> None:
    """100 done jobs in the last 3 minutes: run i took i ms and waited 10·i ms after run_at;
    plus one run finished 2 hours ago (outside the window)."""
    await conn.execute(
        """WITH spec AS (
               SELECT i, now() - (i %% 3) * interval '1 minute' AS done_at,
                      now() - interval '30 minutes' AS due
               FROM generate_series(1, 100) i
               UNION ALL SELECT 0, now() - interval '2 hours', now() - interval '3 hours'
           ), made AS (
               INSERT INTO jobs (project_id, queue_id, handler, status, run_at, finished_at,
                                 attempt, execution_seq, payload)
               SELECT %(p)s, %(q)s, 'h', 'done', due, done_at, 1, 1, jsonb_build_object('i', i)
               FROM spec
               RETURNING id, payload
           )
           INSERT INTO job_executions (job_id, execution_seq, attempt, outcome, started_at,
                                       finished_at, duration_ms)
           SELECT m.id, 1, 1, 'succeeded', s.due + s.i * interval '10 ms', s.done_at,
                  CASE WHEN s.i = 0 THEN 99999 ELSE s.i END
           FROM made m JOIN spec s ON s.i = (m.payload->>'i')::int""",
        {"p": project_id, "q": queue_id},
    )


async def _add_failed_retry(conn: Conn, project_id: int, queue_id: int) -> None:
    """A job that failed 5 minutes ago and waits for its retry (status scheduled)."""
    await conn.execute(
        """WITH j AS (
               INSERT INTO jobs (project_id, queue_id, handler, status, run_at, attempt,
                                 execution_seq)
               VALUES (%(p)s, %(q)s, 'h', 'scheduled', now() + interval '1 hour', 1, 1)
               RETURNING id)
           INSERT INTO job_executions (job_id, execution_seq, attempt, outcome, started_at,
                                       finished_at, duration_ms, error)
           SELECT id, 1, 1, 'failed', now() - interval '6 minutes', now() - interval '5 minutes',
                  60000, 'E: boom' FROM j""",
        {"p": project_id, "q": queue_id},
    )


async def _worker(
    conn: Conn, project_id: int, concurrency: int, queues: list[str], status: str
) -> int:
    value = await scalar(
        conn,
        """INSERT INTO workers (project_id, name, concurrency, queues, status, stopped_at)
           VALUES (%s, 'w', %s, %s, %s::worker_status,
                   CASE WHEN %s IN ('stopped', 'dead') THEN now() END) RETURNING id""",
        project_id,
        concurrency,
        queues,
        status,
        status,
    )
    return int(value)


@pytest.fixture
async def busy_project(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, tenant_b: Tenant
) -> dict[str, int]:
    pid = tenant_a.project_id
    default = await make_queue(client, tenant_a, "default", max_concurrency=5)
    slow = await make_queue(client, tenant_a, "slow")
    await _add_jobs(conn, pid, default["id"], "queued", 5)
    await _add_jobs(conn, pid, default["id"], "scheduled", 1, offset_s=-60)  # due, not promoted
    await _add_jobs(conn, pid, default["id"], "scheduled", 1, offset_s=3600)
    await _add_jobs(conn, pid, default["id"], "waiting", 1)
    await _add_failed_retry(conn, pid, default["id"])
    w1 = await _worker(conn, pid, 4, ["default"], "active")
    await _worker(conn, pid, 6, ["slow"], "active")
    await _worker(conn, pid, 10, ["default", "slow"], "draining")
    await _worker(conn, pid, 50, ["default"], "dead")
    for _ in range(2):
        await claim_one(conn, pid, w1)  # 2 of the 5 queued are now running
    await _add_finished_runs(conn, pid, slow["id"])
    # Another tenant's work must not show up in tenant A's numbers.
    other = await make_queue(client, tenant_b, "default")
    await _add_jobs(conn, tenant_b.project_id, other["id"], "queued", 7)
    await _add_finished_runs(conn, tenant_b.project_id, other["id"])
    # The last hour's runs are read from the rollup, as the scheduler's stats loop folds it.
    await stats.fold(conn, lag_s=0)
    return {"default": default["id"], "slow": slow["id"]}


async def test_metrics_separate_claimable_from_scheduled_and_show_capacity(
    client: httpx.AsyncClient, tenant_a: Tenant, busy_project: dict[str, int]
) -> None:
    r = await client.get(f"{base(tenant_a)}/metrics", headers=tenant_a.headers(Role.VIEWER))
    assert r.status_code == 200, r.text
    body = r.json()
    queues = {q["name"]: q for q in body["queues"]}
    default = queues["default"]
    assert (default["queued"], default["scheduled"], default["scheduled_due"]) == (3, 3, 1)
    assert (default["waiting"], default["in_flight"], default["running"]) == (1, 2, 2)
    assert default["max_concurrency"] == 5
    assert default["worker_capacity"] == 4  # active workers serving it (not draining or dead)
    assert default["oldest_queued_age_s"] >= 0
    assert queues["slow"]["worker_capacity"] == 6 and queues["slow"]["queued"] == 0
    assert body["workers"] == {"active": 2, "draining": 1, "capacity": 10, "in_flight": 2}


async def test_throughput_counts_each_minute_of_the_last_hour(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, busy_project: dict[str, int]
) -> None:
    body = (await client.get(f"{base(tenant_a)}/metrics", headers=owner(tenant_a))).json()
    series = body["throughput"]
    assert len(series) == 60
    minutes = [datetime.fromisoformat(p["minute"]) for p in series]
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(minutes))
    # Minutes counted from when the fixture wrote the runs, not from the request: a minute may
    # turn between the two (CI once saw [34, 33, 0]).
    row = await (
        await conn.execute(
            "SELECT date_trunc('minute', max(e.finished_at)) AS ran,"
            " date_trunc('minute', max(e.finished_at) FILTER (WHERE e.outcome = 'failed'))"
            " AS failed"
            " FROM job_executions e JOIN jobs j ON j.id = e.job_id WHERE j.project_id = %(p)s",
            {"p": tenant_a.project_id},
        )
    ).fetchone()
    assert row is not None
    by_minute = {m: p for m, p in zip(minutes, series, strict=True)}
    # i % 3 = 0, 1, 2 minutes ago: 33, 34 and 33 runs; the failed retry 5 minutes ago.
    ago = [row["ran"] - timedelta(minutes=k) for k in (2, 1, 0)]
    assert [by_minute[m]["done"] for m in ago] == [33, 34, 33]
    assert by_minute[row["failed"]]["failed"] == 1
    assert sum(p["done"] for p in series) == 100 and sum(p["failed"] for p in series) == 1
    assert body["last_hour"]["succeeded"] == 100 and body["last_hour"]["failed"] == 1
    assert body["last_hour"]["finished"] == 101


def _histogram(values: list[float]) -> list[int]:
    """Values counted into the rollup's slots: slot i holds (BOUNDS_MS[i-1], BOUNDS_MS[i]]."""
    hist = [0] * SLOTS
    for v in values:
        hist[sum(1 for b in BOUNDS_MS if b < v)] += 1
    return hist


async def test_latency_percentiles_are_estimated_from_the_rollup(
    client: httpx.AsyncClient, tenant_a: Tenant, busy_project: dict[str, int]
) -> None:
    body = (await client.get(f"{base(tenant_a)}/metrics", headers=owner(tenant_a))).json()
    run = [float(i) for i in range(1, 101)] + [60000.0]  # the failed run counts for run time
    wait = [10.0 * i for i in range(1, 101)]  # only finished jobs' last runs count for waiting
    for name, values in (("run", run), ("queue_wait", wait)):
        got = body["latency_ms"][name]
        for p in (50, 95, 99):
            # The histogram's estimate (no scan of the runs), in the exact value's bucket.
            assert got[f"p{p}"] == pytest.approx(percentile(_histogram(values), p / 100))
            exact = percentile_cont(values, p / 100)
            slot = sum(1 for b in BOUNDS_MS if b < exact)
            low, high = ([0.0, *BOUNDS_MS][slot], [*BOUNDS_MS, float("inf")][slot])
            assert low <= got[f"p{p}"] <= high, (name, p, got, exact)


async def test_metrics_for_one_queue_and_unknown_queue(
    client: httpx.AsyncClient, tenant_a: Tenant, busy_project: dict[str, int]
) -> None:
    url, h = f"{base(tenant_a)}/metrics", owner(tenant_a)
    body = (await client.get(url, params={"queue": "default"}, headers=h)).json()
    assert [q["name"] for q in body["queues"]] == ["default"]
    assert body["last_hour"]["succeeded"] == 0 and body["last_hour"]["failed"] == 1
    assert body["latency_ms"]["queue_wait"] == {"p50": None, "p95": None, "p99": None}
    r = await client.get(url, params={"queue": "nope"}, headers=h)
    assert error_of(r, 404, "not_found")["details"] == {"field": "queue"}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_prometheus_scrape_reports_every_tenants_queues_and_workers(
    client: httpx.AsyncClient,
    conn: Conn,
    app: FastAPI,
    tenant_a: Tenant,
    tenant_b: Tenant,
    busy_project: dict[str, int],
) -> None:
    app.state.settings = app.state.settings.model_copy(update={"metrics_public": True})
    # Both active workers and the dead one report orphan threads and a blocked loop; only
    # live workers count (the ended stall of the draining one is no block).
    await conn.execute(
        """UPDATE workers SET orphan_threads = 2,
                  loop_stall = jsonb_build_object('ongoing', status <> 'draining'),
                  paused_at = CASE WHEN status <> 'draining' THEN now() END
           WHERE project_id = %s AND status IN ('active', 'dead', 'draining')""",
        (tenant_a.project_id,),
    )
    r = await client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    samples = _samples(r.text)

    def q(status: str, tenant: Tenant = tenant_a, queue: str = "default") -> float:
        labels = (
            ("org", tenant.org_slug),
            ("project", tenant.project_slug),
            ("queue", queue),
            ("status", status),
        )
        return samples[("jobyard_queue_jobs", labels)]

    assert (q("queued"), q("scheduled"), q("waiting"), q("running"), q("claimed")) == (
        3, 3, 1, 2, 0,
    )  # fmt: skip
    assert q("queued", tenant_b) == 7
    active = (("org", tenant_a.org_slug), ("project", tenant_a.project_slug), ("status", "active"))
    assert samples[("jobyard_workers", active)] == 2
    assert samples[("jobyard_worker_capacity", active)] == 10
    assert samples[("jobyard_worker_in_flight", active)] == 2
    assert samples[("jobyard_worker_orphan_threads", active)] == 4
    assert samples[("jobyard_workers_loop_blocked", active)] == 2
    draining = (*active[:2], ("status", "draining"))
    assert samples[("jobyard_worker_orphan_threads", draining)] == 2
    assert samples[("jobyard_workers_loop_blocked", draining)] == 0
    assert samples[("jobyard_workers_paused", active)] == 2
    assert samples[("jobyard_workers_paused", draining)] == 0
    paused = (("org", tenant_a.org_slug), ("project", tenant_a.project_slug), ("queue", "slow"))
    assert samples[("jobyard_queue_paused", paused)] == 0


async def test_prometheus_scrape_needs_the_token_when_one_is_set(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    settings = app.state.settings
    app.state.settings = settings.model_copy(
        update={"metrics_token": SecretStr("scrape-token-0123456789")}
    )
    error_of(await client.get("/metrics"), 401, "unauthenticated")
    wrong = {"Authorization": "Bearer scrape-token-wrong"}
    error_of(await client.get("/metrics", headers=wrong), 401, "unauthenticated")
    right = {"Authorization": "Bearer scrape-token-0123456789"}
    assert (await client.get("/metrics", headers=right)).status_code == 200


async def test_prometheus_scrape_is_refused_by_default(
    client: httpx.AsyncClient, app: FastAPI, tenant_a: Tenant
) -> None:
    """Issue 12: /metrics named every tenant's orgs, projects and queues to anyone."""
    err = error_of(await client.get("/metrics"), 401, "unauthenticated")
    assert "JOBYARD_METRICS_TOKEN" in err["message"]
    # No user token or project API key opens it: the scrape is not one tenant's.
    error_of(await client.get("/metrics", headers=tenant_a.headers(Role.OWNER)), 401)
    error_of(await client.get("/metrics", headers=tenant_a.key_headers(Role.ADMIN)), 401)
    app.state.settings = app.state.settings.model_copy(update={"metrics_public": True})
    assert (await client.get("/metrics")).status_code == 200
