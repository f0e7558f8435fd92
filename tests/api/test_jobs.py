"""Jobs over the real app: enqueue (immediate, delayed, priority, idempotent, batch), the
explorer's filters, get with executions, cancel, executions and logs, rate limit, bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from jobyard.core import transitions
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.limits import MAX_PAYLOAD_BYTES
from tests.api.conftest import Tenant
from tests.api.engine_helpers import (
    base,
    claim_one,
    dead_letter,
    error_fields,
    error_of,
    make_queue,
    make_worker,
    owner,
    scalar,
)


async def test_enqueue_immediate_delayed_and_prioritised(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    h = tenant_a.headers(Role.MEMBER)
    now_job = await client.post(
        f"{base(tenant_a)}/jobs",
        json={"handler": "send", "payload": {"to": "x"}, "priority": 9},
        headers=h,
    )
    assert now_job.status_code == 202, now_job.text
    assert now_job.json()["status"] == "queued"
    assert now_job.json()["priority"] == 9 and now_job.json()["queue"] == "default"
    assert now_job.json()["payload"] == {"to": "x"}

    later = await client.post(
        f"{base(tenant_a)}/jobs", json={"handler": "send", "delay_ms": 60_000}, headers=h
    )
    assert later.status_code == 202 and later.json()["status"] == "scheduled"
    at = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    at_job = await client.post(
        f"{base(tenant_a)}/jobs", json={"handler": "send", "run_at": at}, headers=h
    )
    assert at_job.json()["status"] == "scheduled"


async def test_idempotency_key_returns_the_same_job_or_409_on_a_different_payload(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/jobs", owner(tenant_a)
    spec = {"handler": "charge", "payload": {"order": 7}, "idempotency_key": "order-7"}
    first = await client.post(url, json=spec, headers=h)
    again = await client.post(url, json=spec, headers=h)
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    clash = await client.post(url, json={**spec, "payload": {"order": 8}}, headers=h)
    err = error_of(clash, 409, "idempotency_conflict")
    assert err["details"]["job_id"] == first.json()["id"]
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 1


async def test_payload_over_64kb_is_422_and_writes_nothing(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    big = {"blob": "x" * MAX_PAYLOAD_BYTES}
    r = await client.post(
        f"{base(tenant_a)}/jobs", json={"handler": "h", "payload": big}, headers=owner(tenant_a)
    )
    assert error_fields(error_of(r, 422, "validation_error")) == {"payload"}
    r = await client.post(
        f"{base(tenant_a)}/jobs/batch",
        json={"jobs": [{"handler": "h"}, {"handler": "h", "payload": big}]},
        headers=owner(tenant_a),
    )
    assert error_fields(error_of(r, 422, "validation_error")) == {"jobs[1].payload"}
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 0
    assert await scalar(conn, "SELECT count(*) FROM job_batches") == 0


async def test_bad_enqueue_input_names_each_field(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/jobs", owner(tenant_a)
    r = await client.post(
        url,
        json={"queue": "no spaces allowed", "handler": "", "priority": 1001, "delay_ms": -5},
        headers=h,
    )
    assert error_fields(error_of(r, 422)) == {"queue", "handler", "priority", "delay_ms"}
    r = await client.post(url, json={"handler": "h", "run_at": "2030-01-01T09:00:00"}, headers=h)
    assert error_fields(error_of(r, 422)) == {"run_at"}  # no timezone offset
    r = await client.post(url, json={"handler": "bad\x00name"}, headers=h)
    assert error_fields(error_of(r, 422)) == {"handler"}
    r = await client.post(url, json={"queue": "missing", "handler": "h"}, headers=h)
    assert error_of(r, 404, "not_found")["details"] == {"field": "queue"}
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 0


async def test_batch_enqueue_is_202_and_skips_known_idempotency_keys(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/jobs", tenant_a.headers(Role.MEMBER)
    await client.post(url, json={"handler": "h", "idempotency_key": "k1"}, headers=h)
    items = [
        {"handler": "h", "idempotency_key": "k1"},
        {"handler": "h", "idempotency_key": "k2"},
        {"handler": "h", "run_at": "2099-01-01T00:00:00Z"},
    ]
    r = await client.post(f"{url}/batch", json={"jobs": items}, headers=h)
    assert r.status_code == 202, r.text
    assert len(r.json()["job_ids"]) == 2
    assert r.json()["skipped"] == 1 and r.json()["queued"] == 1
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 3


async def test_enqueue_rate_limit_counts_each_job_of_a_batch(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    await make_queue(client, tenant_a)
    await make_queue(client, tenant_b)
    url, h = f"{base(tenant_a)}/jobs", owner(tenant_a)
    r = await client.post(f"{url}/batch", json={"jobs": [{"handler": "h"}] * 1000}, headers=h)
    assert r.status_code == 202, r.text
    r = await client.post(url, json={"handler": "h"}, headers=h)
    err = error_of(r, 429, "rate_limited")
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert err["details"]["retry_after_s"] == int(r.headers["retry-after"])
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 1000
    # The budget is per project.
    r = await client.post(f"{base(tenant_b)}/jobs", json={"handler": "h"}, headers=owner(tenant_b))
    assert r.status_code == 202


async def test_get_job_includes_its_execution_summary(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    r = await client.post(
        f"{base(tenant_a)}/jobs",
        json={"handler": "h", "payload": {"a": 1}},
        headers=owner(tenant_a),
    )
    job_id = r.json()["id"]
    worker = await make_worker(conn, tenant_a.project_id)
    claimed = await claim_one(conn, tenant_a.project_id, worker)
    await transitions.complete_many(conn, [claimed], [{"ok": True}])
    got = await client.get(f"{base(tenant_a)}/jobs/{job_id}", headers=tenant_a.headers(Role.VIEWER))
    body = got.json()
    assert body["status"] == "done" and body["result"] == {"ok": True}
    assert body["payload"] == {"a": 1}
    assert body["executions"]["total"] == 1 and body["executions"]["succeeded"] == 1
    assert body["executions"]["last_execution_seq"] == 1
    error_of(await client.get(f"{base(tenant_a)}/jobs/999999", headers=owner(tenant_a)), 404)


async def test_cancel_is_200_when_pending_202_when_running_409_when_finished(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/jobs", tenant_a.headers(Role.MEMBER)
    running_id = (await client.post(url, json={"handler": "h"}, headers=h)).json()["id"]
    worker = await make_worker(conn, tenant_a.project_id)
    await claim_one(conn, tenant_a.project_id, worker)
    pending_id = (await client.post(url, json={"handler": "h"}, headers=h)).json()["id"]

    r = await client.post(f"{url}/{pending_id}/cancel", headers=h)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    r = await client.post(f"{url}/{running_id}/cancel", headers=h)
    assert r.status_code == 202
    assert r.json()["status"] == "running" and r.json()["cancel_requested_at"] is not None
    r = await client.post(f"{url}/{pending_id}/cancel", headers=h)
    assert error_of(r, 409, "illegal_transition")["details"] == {"status": "cancelled"}


async def test_explorer_filters_by_status_queue_handler_time_and_fingerprint(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    await make_queue(client, tenant_a, "other")
    url, h = f"{base(tenant_a)}/jobs", owner(tenant_a)
    worker = await make_worker(conn, tenant_a.project_id)
    dead_letter_id = await dead_letter(conn, tenant_a.project_id, worker, handler="charge")
    assert dead_letter_id
    a = (await client.post(url, json={"handler": "send"}, headers=h)).json()
    b = (await client.post(url, json={"handler": "send", "queue": "other"}, headers=h)).json()
    c = (await client.post(url, json={"handler": "send", "delay_ms": 600_000}, headers=h)).json()
    fingerprint = await scalar(conn, "SELECT error_fingerprint FROM jobs WHERE handler = 'charge'")

    async def ids(**params: object) -> list[int]:
        r = await client.get(url, params=params, headers=h)
        assert r.status_code == 200, r.text
        return [j["id"] for j in r.json()["items"]]

    all_ids = await ids()
    assert all_ids == sorted(all_ids, reverse=True) and len(all_ids) == 4
    assert await ids(status=["queued", "scheduled"]) == [c["id"], b["id"], a["id"]]
    assert await ids(status="scheduled") == [c["id"]]
    assert await ids(queue="other") == [b["id"]]
    assert len(await ids(handler="charge")) == 1
    assert await ids(error_fingerprint=fingerprint) == await ids(status="dead_letter")
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert await ids(created_from=future) == []
    assert len(await ids(created_to=future)) == 4
    r = await client.get(url, params={"status": "sleeping"}, headers=h)
    assert error_fields(error_of(r, 422)) == {"query.status[0]"}


async def _job_of_three_attempts(
    client: httpx.AsyncClient, tenant: Tenant
) -> tuple[int, dict[str, str]]:
    """A queued job (max_attempts 3) in a new default queue, and the owner's headers."""
    await make_queue(client, tenant)
    h = owner(tenant)
    r = await client.post(
        f"{base(tenant)}/jobs", json={"handler": "h", "max_attempts": 3}, headers=h
    )
    return r.json()["id"], h


async def test_executions_and_logs_of_a_job_are_listed_in_order(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    job_id, h = await _job_of_three_attempts(client, tenant_a)
    worker = await make_worker(conn, tenant_a.project_id)
    for attempt in (1, 2):
        await conn.execute(
            "UPDATE jobs SET status = 'queued', run_at = now() WHERE id = %s", (job_id,)
        )
        job = await claim_one(conn, tenant_a.project_id, worker)
        await transitions.append_log(conn, job, "info", f"try {attempt}", {"n": attempt})
        await transitions.fail(conn, job, "IOError", f"disk {attempt} full")
    ex = await client.get(f"{base(tenant_a)}/jobs/{job_id}/executions", headers=h)
    rows = ex.json()["items"]
    assert [(e["execution_seq"], e["attempt"], e["outcome"]) for e in rows] == [
        (1, 1, "failed"),
        (2, 2, "failed"),
    ]
    assert rows[1]["error"] == "IOError: disk 2 full"
    logs = await client.get(f"{base(tenant_a)}/jobs/{job_id}/logs", headers=h)
    assert [(line["execution_seq"], line["message"]) for line in logs.json()["items"]] == [
        (1, "try 1"),
        (2, "try 2"),
    ]
    only_two = await client.get(
        f"{base(tenant_a)}/jobs/{job_id}/logs", params={"execution_seq": 2}, headers=h
    )
    assert [line["fields"] for line in only_two.json()["items"]] == [{"n": 2}]
    error_of(await client.get(f"{base(tenant_a)}/jobs/424242/logs", headers=h), 404, "not_found")


async def test_the_run_in_flight_is_listed_from_the_job_row_until_its_row_is_written(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    # A claim writes no execution row; the executions list and summary still show the run.
    job_id, h = await _job_of_three_attempts(client, tenant_a)
    url = f"{base(tenant_a)}/jobs/{job_id}/executions"
    worker = await make_worker(conn, tenant_a.project_id)
    first = await claim_one(conn, tenant_a.project_id, worker)
    await transitions.fail(conn, first, "IOError", "disk full")
    await conn.execute("UPDATE jobs SET status = 'queued', run_at = now() WHERE id = %s", (job_id,))
    second = await claim_one(conn, tenant_a.project_id, worker)
    assert await scalar(conn, "SELECT count(*) FROM job_executions") == 1

    page1 = (await client.get(url, params={"limit": 1}, headers=h)).json()
    assert [e["outcome"] for e in page1["items"]] == ["failed"]
    page2 = (
        await client.get(url, params={"limit": 1, "cursor": page1["next_cursor"]}, headers=h)
    ).json()
    (live,) = page2["items"]
    assert page2["next_cursor"] is None
    assert (live["execution_seq"], live["attempt"], live["worker_id"]) == (2, 2, worker)
    assert (live["id"], live["outcome"], live["finished_at"], live["duration_ms"]) == (
        None,
        None,
        None,
        None,
    )
    assert live["started_at"] is not None and live["attempt_charged"] is True
    summary = (await client.get(f"{base(tenant_a)}/jobs/{job_id}", headers=h)).json()
    assert summary["executions"] == {
        "total": 2,
        "open": 1,
        "succeeded": 0,
        "failed": 1,
        "lease_lost": 0,
        "released": 0,
        "cancelled": 0,
        "last_execution_seq": 2,
    }

    # The run ends: its row replaces the job row's view of it, once.
    await transitions.complete_many(conn, [second])
    rows = (await client.get(url, headers=h)).json()["items"]
    assert [(e["execution_seq"], e["outcome"]) for e in rows] == [(1, "failed"), (2, "succeeded")]
    assert rows[1]["id"] is not None and rows[1]["started_at"] == live["started_at"]
    summary = (await client.get(f"{base(tenant_a)}/jobs/{job_id}", headers=h)).json()
    assert (summary["executions"]["open"], summary["executions"]["total"]) == (0, 2)


async def test_inputs_postgresql_cannot_store_are_422_never_500(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/jobs", owner(tenant_a)
    r = await client.post(url, json={"handler": "h", "payload": {"a": ["ok", "no\x00"]}}, headers=h)
    assert error_fields(error_of(r, 422)) == {"payload.a[1]"}
    r = await client.post(url, json={"handler": "h", "payload": {"k\x00": 1}}, headers=h)
    assert error_fields(error_of(r, 422)) == {"payload"}
    r = await client.post(
        f"{url}/batch", json={"jobs": [{"handler": "h", "idempotency_key": "\x00"}]}, headers=h
    )
    assert error_fields(error_of(r, 422)) == {"jobs[0].idempotency_key"}
    # Python accepts UTC offsets up to ±23:59, PostgreSQL only ±15:59: the instant is kept.
    r = await client.post(
        url, json={"handler": "h", "run_at": "2090-01-01T00:00:00+17:48"}, headers=h
    )
    assert r.status_code == 202, r.text
    assert datetime.fromisoformat(r.json()["run_at"]) == datetime(2089, 12, 31, 6, 12, tzinfo=UTC)
    r = await client.post(
        url, json={"handler": "h", "run_at": "0001-01-01T00:00:00+17:48"}, headers=h
    )
    assert error_fields(error_of(r, 422)) == {"run_at"}
    r = await client.get(url, params={"created_from": "2020-01-01T00:00:00+20:00"}, headers=h)
    assert r.status_code == 200 and len(r.json()["items"]) == 1
    # A number is not a date-time, even as the string every query parameter is (the soak's
    # `created_from=-6.124713095673724e-29` was read as a Unix time and answered 200).
    for number in ("-6.124713095673724e-29", "1700000000", "0", "1e3", " 12.5 "):
        for name in ("created_from", "created_to"):
            r = await client.get(url, params={name: number}, headers=h)
            assert error_fields(error_of(r, 422)) == {f"query.{name}"}, (name, number, r.text)
    # The explorer widens created_at bounds by a minute to turn them into id bounds: at the
    # ends of the calendar there is no minute to add, and the filter still answers.
    r = await client.get(
        url,
        params={"created_from": "0001-01-01T00:00:00Z", "created_to": "9999-12-31T23:59:59Z"},
        headers=h,
    )
    assert r.status_code == 200 and len(r.json()["items"]) == 1
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 1
