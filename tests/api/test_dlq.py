"""The dead-letter queue over the real app: list and filter, get, edit, replay, delete."""

from __future__ import annotations

import httpx

from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.limits import MAX_PAYLOAD_BYTES
from tests.api.conftest import Tenant
from tests.api.engine_helpers import (
    base,
    dead_letter,
    error_fields,
    error_of,
    make_queue,
    make_worker,
    owner,
    scalar,
)


async def test_dead_letters_list_filters_by_queue_and_fingerprint(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    await make_queue(client, tenant_a, "billing")
    worker = await make_worker(conn, tenant_a.project_id)
    pid = tenant_a.project_id
    first = await dead_letter(conn, pid, worker, error="card 4242 declined")
    second = await dead_letter(conn, pid, worker, queue="billing", error="card 1881 declined")
    other = await dead_letter(conn, pid, worker, error="timeout after 30s")
    url, h = f"{base(tenant_a)}/dead-letters", tenant_a.headers(Role.VIEWER)

    listed = (await client.get(url, headers=h)).json()["items"]
    assert [d["id"] for d in listed] == [other, second, first]  # newest first
    assert listed[0]["reason"] == "exhausted" and listed[0]["attempts"] == 1
    assert "payload" not in listed[0]
    billing = (await client.get(url, params={"queue": "billing"}, headers=h)).json()["items"]
    assert [d["id"] for d in billing] == [second]
    # Same failure with different numbers → same fingerprint.
    fp = listed[2]["error_fingerprint"]
    assert listed[1]["error_fingerprint"] == fp != listed[0]["error_fingerprint"]
    same = (await client.get(url, params={"error_fingerprint": fp}, headers=h)).json()["items"]
    assert [d["id"] for d in same] == [second, first]


async def test_edit_then_replay_enqueues_a_new_job_with_the_edited_payload(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    worker = await make_worker(conn, tenant_a.project_id)
    dlq_id = await dead_letter(conn, tenant_a.project_id, worker, payload={"card": "old"})
    url, h = f"{base(tenant_a)}/dead-letters/{dlq_id}", tenant_a.headers(Role.MEMBER)

    got = await client.get(url, headers=h)
    assert got.json()["payload"] == {"card": "old"} and got.json()["replayed_at"] is None
    edited = await client.patch(url, json={"payload": {"card": "new"}}, headers=h)
    assert edited.status_code == 200 and edited.json()["payload"] == {"card": "new"}

    replayed = await client.post(f"{url}/replay", headers=h)
    assert replayed.status_code == 202, replayed.text
    job = replayed.json()
    assert job["status"] == "queued" and job["payload"] == {"card": "new"}
    assert job["attempt"] == 0 and job["executions"]["total"] == 0
    after = (await client.get(url, headers=h)).json()
    assert after["replay_job_id"] == job["id"] and after["replayed_at"] is not None

    # Once: a second replay (a double click, a script run twice) would run the work twice.
    again = await client.post(f"{url}/replay", headers=h)
    err = error_of(again, 409, "conflict")
    assert f"already replayed as job {job['id']}" in err["message"]
    assert (await client.get(url, headers=h)).json()["replay_job_id"] == job["id"]
    jobs = "SELECT count(*) FROM jobs WHERE payload = %s::jsonb"
    assert await scalar(conn, jobs, '{"card": "new"}') == 1

    # Replay with a payload of its own (it is saved on the dead letter too).
    other = await dead_letter(conn, tenant_a.project_id, worker, payload={"card": "old"})
    own = await client.post(
        f"{base(tenant_a)}/dead-letters/{other}/replay",
        json={"payload": {"card": "newer"}, "max_attempts": 2},
        headers=h,
    )
    assert own.status_code == 202
    assert own.json()["payload"] == {"card": "newer"} and own.json()["max_attempts"] == 2


async def test_oversized_payload_edit_is_refused_and_keeps_the_old_one(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    worker = await make_worker(conn, tenant_a.project_id)
    dlq_id = await dead_letter(conn, tenant_a.project_id, worker, payload={"keep": 1})
    url, h = f"{base(tenant_a)}/dead-letters/{dlq_id}", owner(tenant_a)
    big = {"blob": "x" * MAX_PAYLOAD_BYTES}
    r = await client.patch(url, json={"payload": big}, headers=h)
    assert error_fields(error_of(r, 422, "validation_error")) == {"payload"}
    r = await client.post(f"{url}/replay", json={"payload": big}, headers=h)
    assert error_fields(error_of(r, 422, "validation_error")) == {"payload"}
    assert (await client.get(url, headers=h)).json()["payload"] == {"keep": 1}
    assert await scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'queued'") == 0


async def test_delete_removes_the_dead_letter_for_good(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    worker = await make_worker(conn, tenant_a.project_id)
    dlq_id = await dead_letter(conn, tenant_a.project_id, worker)
    url = f"{base(tenant_a)}/dead-letters/{dlq_id}"
    # Members replay; deleting is an admin's call.
    error_of(await client.delete(url, headers=tenant_a.headers(Role.MEMBER)), 403, "forbidden")
    r = await client.delete(url, headers=tenant_a.headers(Role.ADMIN))
    assert r.status_code == 204
    error_of(await client.get(url, headers=owner(tenant_a)), 404, "not_found")
    error_of(await client.post(f"{url}/replay", headers=owner(tenant_a)), 404, "not_found")
    assert await scalar(conn, "SELECT count(*) FROM dead_letter_jobs") == 0


async def test_a_job_whose_dead_letter_was_replayed_is_not_retried_as_well(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    """Found by a user check (2026-12-05): a replay, then a retry of the original job, ran one
    failure's work twice (two live jobs). Either way round, the second is refused."""
    await make_queue(client, tenant_a)
    worker = await make_worker(conn, tenant_a.project_id)
    h = tenant_a.headers(Role.MEMBER)
    dlq_id = await dead_letter(conn, tenant_a.project_id, worker)
    original = await scalar(conn, "SELECT job_id FROM dead_letter_jobs WHERE id = %s", dlq_id)
    replayed = await client.post(f"{base(tenant_a)}/dead-letters/{dlq_id}/replay", headers=h)
    assert replayed.status_code == 202, replayed.text
    retried = await client.post(f"{base(tenant_a)}/jobs/{original}/retry", headers=h)
    err = error_of(retried, 409)
    assert f"already replayed as job {replayed.json()['id']}" in err["message"]
    assert await scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", original) == (
        "dead_letter"
    )

    # The other way round: the job retried first, then its dead letter replayed.
    other = await dead_letter(conn, tenant_a.project_id, worker)
    job = await scalar(conn, "SELECT job_id FROM dead_letter_jobs WHERE id = %s", other)
    assert (await client.post(f"{base(tenant_a)}/jobs/{job}/retry", headers=h)).status_code == 200
    again = await client.post(f"{base(tenant_a)}/dead-letters/{other}/replay", headers=h)
    assert f"already replayed as job {job}" in error_of(again, 409)["message"]
    assert await scalar(conn, "SELECT count(*) FROM jobs WHERE status = 'queued'") == 2
