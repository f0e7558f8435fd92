"""Workflows and batches over the real app (issue 14): a DAG enqueued in one request, cycles
and foreign parents refused with 422, the graph, cancel, retry of a failed step, batch
callbacks and progress."""

from __future__ import annotations

import httpx
import pytest

from jobyard.core import transitions
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from tests.api.conftest import Tenant
from tests.api.engine_helpers import base, claim_one, make_queue, make_worker, owner


def _steps(*specs: tuple[str, list[str]]) -> dict[str, object]:
    return {"steps": [{"key": k, "handler": "noop", "after": a} for k, a in specs]}


async def test_a_cycle_is_refused_with_422_naming_it_and_nothing_is_enqueued(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    body = _steps(("a", ["b"]), ("b", ["a"]))
    r = await client.post(f"{base(tenant_a)}/workflows", json=body, headers=owner(tenant_a))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"].startswith("the steps form a cycle: ")
    assert "steps" in str(r.json()["error"]["details"])
    cur = await conn.execute("SELECT count(*) AS n FROM jobs")
    assert await cur.fetchone() == {"n": 0}


async def test_a_parent_of_another_project_is_refused_as_missing(
    client: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    await make_queue(client, tenant_a)
    await make_queue(client, tenant_b)
    theirs = await client.post(
        f"{base(tenant_b)}/jobs", json={"handler": "noop"}, headers=owner(tenant_b)
    )
    foreign = theirs.json()["id"]
    for url, body in (
        (f"{base(tenant_a)}/jobs", {"handler": "noop", "depends_on": [foreign]}),
        (
            f"{base(tenant_a)}/workflows",
            {"steps": [{"key": "a", "handler": "noop", "after": [foreign]}]},
        ),
    ):
        # Another tenant's job reads as missing (404), as every other tenant's object does.
        r = await client.post(url, json=body, headers=owner(tenant_a))
        assert r.status_code == 404, r.text
        assert "do not exist in this project" in r.json()["error"]["message"]


async def test_a_diamond_is_enqueued_drawn_cancelled_and_a_failed_step_retried(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    h = tenant_a.headers(Role.MEMBER)
    body = _steps(("top", []), ("left", ["top"]), ("right", ["top"]), ("join", ["left", "right"]))
    r = await client.post(f"{base(tenant_a)}/workflows", json=body, headers=h)
    assert r.status_code == 202, r.text
    ids = r.json()["job_ids"]
    graph = await client.get(f"{base(tenant_a)}/workflows/{ids['join']}", headers=h)
    assert graph.status_code == 200
    g = graph.json()
    assert {n["id"]: n["status"] for n in g["nodes"]} == {
        ids["top"]: "queued",
        ids["left"]: "waiting",
        ids["right"]: "waiting",
        ids["join"]: "waiting",
    }
    assert len(g["edges"]) == 4 and g["truncated"] is False
    worker = await make_worker(conn, tenant_a.project_id)
    top = await claim_one(conn, tenant_a.project_id, worker)
    await transitions.fail(conn, top, "E", "boom", retryable=False)
    g = (await client.get(f"{base(tenant_a)}/workflows/{ids['top']}", headers=h)).json()
    reasons = {n["id"]: n["cancel_reason"] for n in g["nodes"] if n["status"] == "cancelled"}
    assert reasons[ids["left"]] == f"dependency failed: parent job {ids['top']} ended dead_letter"
    retried = await client.post(f"{base(tenant_a)}/workflows/{ids['top']}/retry", headers=h)
    assert retried.status_code == 200, retried.text
    assert sorted(retried.json()["revived"]) == sorted([ids["left"], ids["right"], ids["join"]])
    again = await client.post(f"{base(tenant_a)}/workflows/{ids['left']}/retry", headers=h)
    assert again.status_code == 409
    cancelled = await client.post(f"{base(tenant_a)}/workflows/{ids['join']}/cancel", headers=h)
    assert cancelled.json()["cancelled"] == sorted(ids.values())


async def test_batch_callbacks_and_progress(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    h = tenant_a.headers(Role.MEMBER)
    body = {
        "jobs": [{"handler": "noop"} for _ in range(3)],
        "on_complete": {"handler": "report", "payload": {"to": "ops"}},
    }
    r = await client.post(f"{base(tenant_a)}/jobs/batch", json=body, headers=h)
    assert r.status_code == 202, r.text
    batch = r.json()["batch_id"]
    worker = await make_worker(conn, tenant_a.project_id)
    first = await claim_one(conn, tenant_a.project_id, worker)
    await transitions.fail(conn, first, "E", "boom", retryable=False)
    status = (await client.get(f"{base(tenant_a)}/batches/{batch}", headers=h)).json()
    assert {k: status[k] for k in ("size", "done", "failed", "cancelled", "pending")} == {
        "size": 3,
        "done": 0,
        "failed": 1,
        "cancelled": 0,
        "pending": 2,
    }
    assert status["callbacks"]["on_complete"]["handler"] == "report"
    c = await client.post(f"{base(tenant_a)}/batches/{batch}/cancel", headers=h)
    assert len(c.json()["cancelled"]) == 2
    status = (await client.get(f"{base(tenant_a)}/batches/{batch}", headers=h)).json()
    assert status["pending"] == 0 and status["completed_at"] is not None
    (cb,) = status["callback_job_ids"]
    job = (await client.get(f"{base(tenant_a)}/jobs/{cb}", headers=h)).json()
    assert job["handler"] == "report"
    assert job["payload"] == {
        "to": "ops",
        "batch": {"id": batch, "size": 3, "done": 0, "failed": 1, "cancelled": 2},
    }


async def test_a_callback_on_an_unknown_queue_is_refused(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    body = {"jobs": [{"handler": "noop"}], "on_success": {"handler": "x", "queue": "nope"}}
    r = await client.post(f"{base(tenant_a)}/jobs/batch", json=body, headers=owner(tenant_a))
    # The message names the field, never the submitted value (issue 12: no echo).
    assert r.status_code == 404 and "callback queue" in r.json()["error"]["message"]


@pytest.mark.parametrize("entry", ["job", "workflow", "bulk", "failure_group"])
async def test_every_retry_route_revives_what_the_failure_cancelled(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, entry: str
) -> None:
    """One mechanism (core.actions.retry) behind every retry: a job's retry now, a workflow
    step's retry, a bulk retry by filter and a failure group's retry all put the dependents
    the failure policy cancelled back to waiting."""
    await make_queue(client, tenant_a)
    h = owner(tenant_a)
    body = _steps(("top", []), ("mid", ["top"]), ("end", ["mid"]))
    ids = (await client.post(f"{base(tenant_a)}/workflows", json=body, headers=h)).json()["job_ids"]
    worker = await make_worker(conn, tenant_a.project_id)
    top = await claim_one(conn, tenant_a.project_id, worker)
    await transitions.fail(conn, top, "E", "boom", retryable=False)
    cur = await conn.execute("SELECT error_fingerprint FROM jobs WHERE id = %s", (ids["top"],))
    fingerprint = (await cur.fetchone() or {})["error_fingerprint"]
    request = {
        "job": ("POST", f"/jobs/{ids['top']}/retry", None),
        "workflow": ("POST", f"/workflows/{ids['top']}/retry", None),
        "bulk": ("POST", "/jobs/bulk", {"action": "retry", "filter": {"status": ["dead_letter"]}}),
        "failure_group": ("POST", f"/failure-groups/{fingerprint}/retry", None),
    }[entry]
    r = await client.request(request[0], base(tenant_a) + request[1], json=request[2], headers=h)
    assert r.status_code == 200, r.text
    cur = await conn.execute(
        "SELECT id, status::text AS s, cancel_reason FROM jobs WHERE id = ANY(%s) ORDER BY id",
        (list(ids.values()),),
    )
    assert [(row["s"], row["cancel_reason"]) for row in await cur.fetchall()] == [
        ("queued", None),
        ("waiting", None),
        ("waiting", None),
    ]


async def test_a_parent_that_already_failed_is_a_409_conflict_not_a_422(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    """The soak's find: `depends_on` naming a parent that already ended cancelled was a 422, so
    schemathesis' positive-data check saw a schema-valid request rejected. The request is
    valid; the parent's state refuses it: 409, from /workflows and /jobs alike."""
    await make_queue(client, tenant_a)
    h = owner(tenant_a)
    job = (await client.post(f"{base(tenant_a)}/jobs", json={"handler": "noop"}, headers=h)).json()[
        "id"
    ]
    assert (await client.post(f"{base(tenant_a)}/jobs/{job}/cancel", headers=h)).status_code == 200
    step = {"key": "0", "handler": "P", "depends_on": [job], "max_attempts": 1}
    r = await client.post(f"{base(tenant_a)}/workflows", json={"steps": [step]}, headers=h)
    assert r.status_code == 409, r.text
    assert r.json()["error"]["message"].startswith(f"parent job {job} already ended cancelled")
    r = await client.post(
        f"{base(tenant_a)}/jobs", json={"handler": "h", "depends_on": [job]}, headers=h
    )
    assert r.status_code == 409, r.text
    r = await client.post(
        f"{base(tenant_a)}/jobs",
        json={"handler": "h", "depends_on": [job], "run_anyway": True},
        headers=h,
    )
    assert r.status_code == 202 and r.json()["status"] == "queued", r.text
