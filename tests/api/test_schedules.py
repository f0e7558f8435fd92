"""Schedules over the real app: create/update/delete, validation naming the field, preview."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import httpx

from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.limits import MAX_PAYLOAD_BYTES
from tests.api.conftest import Tenant
from tests.api.engine_helpers import base, error_fields, error_of, make_queue, owner, scalar


def _body(queue_id: int, **fields: object) -> dict[str, object]:
    return {
        "name": "nightly report",
        "queue_id": queue_id,
        "cron": "30 2 * * *",
        "timezone": "Europe/London",
        "handler": "report",
        **fields,
    }


async def test_schedule_create_get_update_delete(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    queue = await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/schedules", tenant_a.headers(Role.ADMIN)
    r = await client.post(url, json=_body(queue["id"], payload={"format": "pdf"}), headers=h)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["queue"] == "default" and created["enabled"] is True
    next_run = datetime.fromisoformat(created["next_run_at"])
    assert next_run > datetime.now(UTC)
    # 02:30 London wall time is 01:30 or 02:30 UTC depending on the season.
    assert next_run.astimezone(UTC).minute == 30

    one = f"{url}/{created['id']}"
    assert (await client.get(one, headers=tenant_a.headers(Role.VIEWER))).json() == created
    listed = (await client.get(url, headers=h)).json()["items"]
    assert [s["id"] for s in listed] == [created["id"]]

    disabled = await client.patch(one, json={"enabled": False}, headers=h)
    assert disabled.status_code == 200, disabled.text
    assert disabled.json()["enabled"] is False and disabled.json()["next_run_at"] is None
    retimed = await client.patch(one, json={"enabled": True, "cron": "0 */2 * * *"}, headers=h)
    assert retimed.json()["cron"] == "0 */2 * * *" and retimed.json()["next_run_at"]

    assert (await client.delete(one, headers=h)).status_code == 204
    error_of(await client.get(one, headers=h), 404, "not_found")


async def test_bad_cron_and_unknown_timezone_name_their_field(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    queue = await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/schedules", owner(tenant_a)
    r = await client.post(url, json=_body(queue["id"], cron="61 * * * *"), headers=h)
    err = error_of(r, 422, "validation_error")
    assert error_fields(err) == {"cron"}
    assert "minute" in err["message"]
    r = await client.post(url, json=_body(queue["id"], cron="every day"), headers=h)
    assert error_fields(error_of(r, 422)) == {"cron"}
    r = await client.post(url, json=_body(queue["id"], timezone="Mars/Olympus_Mons"), headers=h)
    assert error_fields(error_of(r, 422, "validation_error")) == {"timezone"}
    r = await client.post(
        url, json=_body(queue["id"], payload={"x": "y" * MAX_PAYLOAD_BYTES}), headers=h
    )
    assert error_fields(error_of(r, 422)) == {"payload"}
    r = await client.post(url, json=_body(queue["id"], overlap="sometimes"), headers=h)
    assert error_fields(error_of(r, 422)) == {"overlap"}
    r = await client.post(url, json=_body(999_999), headers=h)
    assert error_of(r, 404, "not_found")["details"] == {"field": "queue_id"}
    assert await scalar(conn, "SELECT count(*) FROM scheduled_jobs") == 0

    ok = await client.post(url, json=_body(queue["id"]), headers=h)
    r = await client.patch(f"{url}/{ok.json()['id']}", json={"timezone": "Nowhere"}, headers=h)
    assert error_fields(error_of(r, 422)) == {"timezone"}
    r = await client.post(url, json=_body(queue["id"]), headers=h)
    assert error_of(r, 409, "conflict")["details"] == {"field": "name"}


async def test_preview_lists_the_next_fire_times_in_utc(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    url, h = f"{base(tenant_a)}/schedules/preview", tenant_a.headers(Role.VIEWER)
    r = await client.get(
        url, params={"cron": "0 9 * * 1-5", "timezone": "Asia/Kolkata", "n": 7}, headers=h
    )
    assert r.status_code == 200, r.text
    times = [datetime.fromisoformat(t) for t in r.json()["fire_times"]]
    assert len(times) == 7 and times == sorted(times)
    # 09:00 in Kolkata (UTC+05:30, no DST) is 03:30 UTC, on weekdays only.
    assert all((t.hour, t.minute) == (3, 30) and t.weekday() < 5 for t in times)
    assert all(t > datetime.now(UTC) for t in times)

    r = await client.get(url, params={"cron": "0 25 * * *"}, headers=h)
    assert error_fields(error_of(r, 422)) == {"cron"}
    r = await client.get(url, params={"cron": "* * * * *", "timezone": "UTC+99"}, headers=h)
    assert error_fields(error_of(r, 422)) == {"timezone"}
    r = await client.get(url, params={"cron": "* * * * *", "n": 0}, headers=h)
    assert error_fields(error_of(r, 422)) == {"query.n"}
    r = await client.get(url, headers=h)
    assert error_fields(error_of(r, 422)) == {"query.cron"}


async def test_preview_of_a_stored_schedule(client: httpx.AsyncClient, tenant_a: Tenant) -> None:
    queue = await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/schedules", owner(tenant_a)
    created = (
        await client.post(url, json=_body(queue["id"], cron="*/15 * * * *"), headers=h)
    ).json()
    r = await client.get(f"{url}/{created['id']}/preview", params={"n": 4}, headers=h)
    times = [datetime.fromisoformat(t) for t in r.json()["fire_times"]]
    assert len(times) == 4
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(times)] == [900] * 3
    # The stored next fire, unless a quarter-hour boundary passed between the two requests.
    stored = datetime.fromisoformat(created["next_run_at"])
    assert (times[0] - stored).total_seconds() in (0, 900)
