"""Operator actions over the real app: why, retry now, run now, bulk actions on a filter (in
batches, with counts), failure groups and their bulk actions, firing a schedule by hand."""

from __future__ import annotations

import httpx

from jobyard.core import actions
from jobyard.core.read_models import JobFilters
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import ProjectId
from tests.api.conftest import Tenant
from tests.api.engine_helpers import base, dead_letter, error_of, make_queue, make_worker, scalar


async def _enqueue(client: httpx.AsyncClient, tenant: Tenant, **body: object) -> int:
    r = await client.post(
        f"{base(tenant)}/jobs", json={"handler": "send", **body}, headers=tenant.headers()
    )
    assert r.status_code == 202, r.text
    return int(r.json()["id"])


async def test_retry_now_requeues_a_dead_letter_and_marks_its_letter_replayed(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    worker = await make_worker(conn, tenant_a.project_id)
    letter = await dead_letter(conn, tenant_a.project_id, worker)
    job_id = await scalar(conn, "SELECT job_id FROM dead_letter_jobs WHERE id = %s", letter)

    r = await client.post(
        f"{base(tenant_a)}/jobs/{job_id}/retry", headers=tenant_a.headers(Role.MEMBER)
    )
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "queued" and r.json()["finished_at"] is None
    assert r.json()["max_attempts"] == 2  # one more attempt than it had used
    replayed = await scalar(
        conn, "SELECT replay_job_id FROM dead_letter_jobs WHERE id = %s", letter
    )
    assert replayed == job_id
    # The overview's count and the DLQ page's pending list agree: this letter left both.
    metrics = await client.get(f"{base(tenant_a)}/metrics", headers=tenant_a.headers())
    assert sum(q["dead_letters"] for q in metrics.json()["queues"]) == 0

    again = await client.post(f"{base(tenant_a)}/jobs/{job_id}/retry", headers=tenant_a.headers())
    err = error_of(again, 409, "illegal_transition")
    assert "queued" in err["message"] and "dead_letter" in err["message"]


async def test_run_now_queues_a_scheduled_job_and_refuses_a_queued_one(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    later = await _enqueue(client, tenant_a, delay_ms=3_600_000)
    now = await _enqueue(client, tenant_a)
    r = await client.post(f"{base(tenant_a)}/jobs/{later}/run-now", headers=tenant_a.headers())
    assert r.status_code == 200 and r.json()["status"] == "queued", r.text
    refused = await client.post(f"{base(tenant_a)}/jobs/{now}/run-now", headers=tenant_a.headers())
    assert "only scheduled" in error_of(refused, 409, "illegal_transition")["message"]
    missing = await client.post(f"{base(tenant_a)}/jobs/999999/run-now", headers=tenant_a.headers())
    error_of(missing, 404)


async def test_why_answers_structured_reasons(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    queue_id = await scalar(
        conn, "SELECT id FROM queues WHERE project_id = %s", tenant_a.project_id
    )
    await client.post(f"{base(tenant_a)}/queues/{queue_id}/pause", headers=tenant_a.headers())
    job_id = await _enqueue(client, tenant_a)
    r = await client.get(
        f"{base(tenant_a)}/jobs/{job_id}/why", headers=tenant_a.headers(Role.VIEWER)
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "queued"
    codes = [x["code"] for x in body["reasons"]]
    assert codes[:1] == ["queue_paused"] and "position" in codes and "no_live_worker" in codes
    assert all({"code", "sentence", "ends_at", "details"} <= set(x) for x in body["reasons"])


async def test_bulk_cancel_walks_a_filter_in_batches_and_counts(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    await make_queue(client, tenant_a, "other")
    ids = [await _enqueue(client, tenant_a) for _ in range(7)]
    keep = await _enqueue(client, tenant_a, queue="other")
    result = await actions.bulk(
        conn, ProjectId(tenant_a.project_id), "cancel", JobFilters(queue="default"), batch_size=3
    )
    assert (result.matched, result.changed, result.batches) == (7, 7, 3)
    statuses = await scalar(
        conn, "SELECT array_agg(DISTINCT status::text) FROM jobs WHERE id = ANY(%s)", ids
    )
    assert statuses == ["cancelled"]
    assert await scalar(conn, "SELECT status::text FROM jobs WHERE id = %s", keep) == "queued"

    r = await client.post(
        f"{base(tenant_a)}/jobs/bulk",
        json={"action": "retry", "filter": {"queue": "default", "status": ["cancelled"]}},
        headers=tenant_a.headers(Role.MEMBER),
    )
    assert r.status_code == 200, r.text
    assert r.json() | {"batches": 0} == {
        "action": "retry", "matched": 7, "changed": 7, "skipped": 0, "batches": 0,
        "truncated": False,
    }  # fmt: skip
    # The cap: a request stops at max_jobs and says so.
    capped = await actions.bulk(
        conn, ProjectId(tenant_a.project_id), "cancel", JobFilters(), batch_size=2, max_jobs=4
    )
    assert (capped.matched, capped.truncated) == (4, True)

    member = await client.post(
        f"{base(tenant_a)}/jobs/bulk-delete",
        json={"filter": {}},
        headers=tenant_a.headers(Role.MEMBER),
    )
    error_of(member, 403)
    gone = await client.post(
        f"{base(tenant_a)}/jobs/bulk-delete",
        json={"filter": {"status": ["cancelled"]}},
        headers=tenant_a.headers(Role.ADMIN),
    )
    assert gone.json()["changed"] == 4
    assert (
        await scalar(conn, "SELECT count(*) FROM jobs WHERE project_id = %s", tenant_a.project_id)
        == 4
    )
    bad = await client.post(
        f"{base(tenant_a)}/jobs/bulk", json={"action": "explode"}, headers=tenant_a.headers()
    )
    error_of(bad, 422)


async def test_failure_groups_group_by_fingerprint_and_retry_or_discard_a_group(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    await make_queue(client, tenant_a, "billing")
    worker = await make_worker(conn, tenant_a.project_id)
    p = tenant_a.project_id
    # Same bug, different card numbers: one group across two queues and two handlers.
    await dead_letter(conn, p, worker, error="card 4242 declined")
    await dead_letter(
        conn, p, worker, queue="billing", handler="refund", error="card 1111 declined"
    )
    await dead_letter(conn, p, worker, error="timeout talking to smtp")
    r = await client.get(f"{base(tenant_a)}/failure-groups", headers=tenant_a.headers(Role.VIEWER))
    assert r.status_code == 200, r.text
    groups = {g["sample_error"].split(":")[1].strip()[:4]: g for g in r.json()["items"]}
    card = groups["card"]
    assert card["count"] == 2 and card["dead_lettered"] == 2
    assert card["queues"] == ["billing", "default"] and card["handlers"] == ["charge", "refund"]
    assert sum(card["trend"]) == 2 and len(card["trend"]) == 24
    fp = card["fingerprint"]

    retried = await client.post(
        f"{base(tenant_a)}/failure-groups/{fp}/retry", headers=tenant_a.headers(Role.MEMBER)
    )
    assert (retried.json()["matched"], retried.json()["changed"]) == (2, 2)
    error_of(
        await client.get(f"{base(tenant_a)}/failure-groups/{fp}", headers=tenant_a.headers()), 404
    )

    smtp = groups["time"]["fingerprint"]
    member = await client.post(
        f"{base(tenant_a)}/failure-groups/{smtp}/discard", headers=tenant_a.headers(Role.MEMBER)
    )
    error_of(member, 403)
    discarded = await client.post(
        f"{base(tenant_a)}/failure-groups/{smtp}/discard", headers=tenant_a.headers(Role.ADMIN)
    )
    assert discarded.json()["changed"] == 1
    assert (
        await scalar(
            conn, "SELECT count(*) FROM dead_letter_jobs WHERE error_fingerprint = %s", smtp
        )
        == 0
    )


async def test_a_schedule_fires_now_by_hand_without_changing_its_timing(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    queue = await make_queue(client, tenant_a)
    created = await client.post(
        f"{base(tenant_a)}/schedules",
        json={"name": "nightly", "queue_id": queue["id"], "cron": "0 3 * * *", "handler": "report"},
        headers=tenant_a.headers(Role.ADMIN),
    )
    assert created.status_code == 201, created.text
    sid, next_run = created.json()["id"], created.json()["next_run_at"]
    r = await client.post(
        f"{base(tenant_a)}/schedules/{sid}/trigger", headers=tenant_a.headers(Role.MEMBER)
    )
    assert r.status_code == 202, r.text
    job = await client.get(
        f"{base(tenant_a)}/jobs/{r.json()['job_id']}", headers=tenant_a.headers()
    )
    assert job.json()["status"] == "queued" and job.json()["handler"] == "report"
    again = await client.get(f"{base(tenant_a)}/schedules/{sid}", headers=tenant_a.headers())
    assert again.json()["next_run_at"] == next_run
