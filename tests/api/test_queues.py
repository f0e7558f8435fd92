"""Queues and retry policies over the real app: CRUD, pause/resume, bad input per field."""

from __future__ import annotations

import httpx

from jobyard.core import claim
from jobyard.core.claim import queues_by_names
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId
from tests.api.conftest import Tenant
from tests.api.engine_helpers import (
    base,
    error_fields,
    error_of,
    make_queue,
    make_worker,
    owner,
    scalar,
)


async def test_queue_create_get_list_update_delete_round_trip(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    h = owner(tenant_a)
    created = await make_queue(client, tenant_a, "emails", priority=5, max_concurrency=3)
    assert created["priority"] == 5 and created["max_concurrency"] == 3
    assert created["is_paused"] is False
    url = f"{base(tenant_a)}/queues/{created['id']}"

    assert (await client.get(url, headers=h)).json() == created
    listed = (await client.get(f"{base(tenant_a)}/queues", headers=h)).json()
    assert [q["name"] for q in listed["items"]] == ["emails"]
    assert listed["next_cursor"] is None

    # PATCH changes only what is sent; null clears a nullable setting.
    r = await client.patch(
        url, json={"max_concurrency": None, "default_timeout_ms": 500}, headers=h
    )
    assert r.status_code == 200, r.text
    assert r.json()["max_concurrency"] is None
    assert r.json()["default_timeout_ms"] == 500
    assert r.json()["priority"] == 5

    r = await client.delete(url, headers=h)
    assert r.status_code == 204 and r.content == b""
    error_of(await client.get(url, headers=h), 404, "not_found")


async def test_pause_stops_claims_and_resume_restarts_them(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    h = owner(tenant_a)
    queue = await make_queue(client, tenant_a)
    r = await client.post(
        f"{base(tenant_a)}/jobs", json={"queue": "default", "handler": "noop"}, headers=h
    )
    assert r.status_code == 202, r.text
    worker = await make_worker(conn, tenant_a.project_id)
    project = ProjectId(tenant_a.project_id)

    paused = await client.post(f"{base(tenant_a)}/queues/{queue['id']}/pause", headers=h)
    assert paused.status_code == 200 and paused.json()["is_paused"] is True
    # Pausing twice is fine (idempotent).
    assert (await client.post(f"{base(tenant_a)}/queues/{queue['id']}/pause", headers=h)).json()[
        "is_paused"
    ]
    (ref,) = await queues_by_names(conn, project, ["default"])
    assert await claim.claim_batch(conn, ref, worker, 10, lease_s=30) == []

    resumed = await client.post(f"{base(tenant_a)}/queues/{queue['id']}/resume", headers=h)
    assert resumed.json()["is_paused"] is False
    (ref,) = await queues_by_names(conn, project, ["default"])
    assert len(await claim.claim_batch(conn, ref, worker, 10, lease_s=30)) == 1


async def test_create_queue_bad_input_names_every_field(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    body = {
        "name": "has spaces!",
        "priority": 5000,
        "max_concurrency": 0,
        "default_timeout_ms": -1,
        "bogus": 1,
    }
    r = await client.post(f"{base(tenant_a)}/queues", json=body, headers=owner(tenant_a))
    err = error_of(r, 422, "validation_error")
    assert error_fields(err) >= {
        "name",
        "priority",
        "max_concurrency",
        "default_timeout_ms",
        "bogus",
    }


async def test_duplicate_queue_name_is_409_naming_the_field(
    client: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    await make_queue(client, tenant_a, "dup")
    r = await client.post(f"{base(tenant_a)}/queues", json={"name": "dup"}, headers=owner(tenant_a))
    err = error_of(r, 409, "conflict")
    assert err["details"] == {"field": "name"}
    # Names are per project: another tenant may use the same one.
    await make_queue(client, tenant_b, "dup")


async def test_queue_cannot_use_another_projects_retry_policy(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    r = await client.post(
        f"{base(tenant_b)}/retry-policies", json={"name": "theirs"}, headers=owner(tenant_b)
    )
    foreign_policy = r.json()["id"]
    r = await client.post(
        f"{base(tenant_a)}/queues",
        json={"name": "q", "retry_policy_id": foreign_policy},
        headers=owner(tenant_a),
    )
    assert error_of(r, 404, "not_found")["details"] == {"field": "retry_policy_id"}
    assert await scalar(conn, "SELECT count(*) FROM queues") == 0
    queue = await make_queue(client, tenant_a, "q")
    r = await client.patch(
        f"{base(tenant_a)}/queues/{queue['id']}",
        json={"retry_policy_id": foreign_policy},
        headers=owner(tenant_a),
    )
    assert error_of(r, 404, "not_found")["details"] == {"field": "retry_policy_id"}
    assert await scalar(conn, "SELECT retry_policy_id FROM queues") is None


async def test_queue_with_unfinished_jobs_is_not_deleted(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    h = owner(tenant_a)
    queue = await make_queue(client, tenant_a)
    await client.post(f"{base(tenant_a)}/jobs", json={"handler": "noop"}, headers=h)
    r = await client.delete(f"{base(tenant_a)}/queues/{queue['id']}", headers=h)
    err = error_of(r, 409, "conflict")
    assert err["details"] == {"unfinished_jobs": 1, "schedules": 0}
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 1


async def test_null_priority_is_refused(client: httpx.AsyncClient, tenant_a: Tenant) -> None:
    queue = await make_queue(client, tenant_a)
    r = await client.patch(
        f"{base(tenant_a)}/queues/{queue['id']}", json={"priority": None}, headers=owner(tenant_a)
    )
    error_of(r, 422, "validation_error")


async def test_retry_policy_crud_and_queue_falls_back_when_it_is_deleted(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    h = owner(tenant_a)
    r = await client.post(
        f"{base(tenant_a)}/retry-policies",
        json={"name": "fast", "backoff": "fixed", "base_delay_ms": 100, "max_delay_ms": 100},
        headers=h,
    )
    assert r.status_code == 201, r.text
    policy = r.json()
    assert policy["max_attempts"] == 5 and policy["queue_count"] == 0
    queue = await make_queue(client, tenant_a, "q", retry_policy_id=policy["id"])
    assert queue["retry_policy_name"] == "fast"

    url = f"{base(tenant_a)}/retry-policies/{policy['id']}"
    got = (await client.get(url, headers=h)).json()
    assert got["queue_count"] == 1
    r = await client.patch(url, json={"max_attempts": 2, "name": "faster"}, headers=h)
    assert r.json()["max_attempts"] == 2 and r.json()["name"] == "faster"

    assert (await client.delete(url, headers=h)).status_code == 204
    queue_now = (await client.get(f"{base(tenant_a)}/queues/{queue['id']}", headers=h)).json()
    assert queue_now["retry_policy_id"] is None
    error_of(await client.get(url, headers=h), 404, "not_found")


async def test_retry_policy_delays_out_of_order_name_base_delay_ms(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    h = owner(tenant_a)
    r = await client.post(
        f"{base(tenant_a)}/retry-policies",
        json={"name": "p", "base_delay_ms": 5000, "max_delay_ms": 10},
        headers=h,
    )
    error_of(r, 422, "validation_error")
    assert await scalar(conn, "SELECT count(*) FROM retry_policies") == 0
    r = await client.post(f"{base(tenant_a)}/retry-policies", json={"name": "p"}, headers=h)
    url = f"{base(tenant_a)}/retry-policies/{r.json()['id']}"
    # One delay alone is a valid request that conflicts with the stored other delay (the
    # database's CHECK says so): 409 naming the field sent, not 422. The soak found the 422:
    # schemathesis' positive-data check refuses a schema-valid request rejected with 422.
    r = await client.patch(url, json={"max_delay_ms": 1}, headers=h)
    assert error_fields(error_of(r, 409, "conflict")) == {"max_delay_ms"}
    # Both together, in order: accepted.
    r = await client.patch(url, json={"base_delay_ms": 10, "max_delay_ms": 1000}, headers=h)
    assert r.status_code == 200 and r.json()["max_delay_ms"] == 1000, r.text
    r = await client.patch(url, json={"base_delay_ms": 438747, "jitter": False}, headers=h)
    assert error_fields(error_of(r, 409, "conflict")) == {"base_delay_ms"}
    # Both in one request, out of order: the request itself is invalid (422).
    r = await client.patch(url, json={"base_delay_ms": 5000, "max_delay_ms": 10}, headers=h)
    error_of(r, 422, "validation_error")
    assert await scalar(conn, "SELECT base_delay_ms FROM retry_policies") == 10


async def test_retry_policy_fields_cannot_be_nulled(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    h = owner(tenant_a)
    r = await client.post(f"{base(tenant_a)}/retry-policies", json={"name": "p"}, headers=h)
    r = await client.patch(
        f"{base(tenant_a)}/retry-policies/{r.json()['id']}", json={"jitter": None}, headers=h
    )
    assert error_fields(error_of(r, 422, "validation_error")) == {"jitter"}
