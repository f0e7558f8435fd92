"""Error responses never echo what the client submitted (issue 12: some 422 messages quoted it).

The error renderer (api/errors.py) withholds submitted values from every envelope's message and
details, whatever raised the error: request validation, a domain ValidationFailed (cron, time
zone) or a Conflict. The field is still named, and the message still says what is wrong.
"""

from __future__ import annotations

import json

import httpx

from jobyard.api.errors import withhold
from jobyard.domain.enums import Role
from tests.api.conftest import Tenant

# Marker values: distinctive enough that finding them anywhere in a response means an echo.
BAD_HOUR = "7 47 * * *"  # hour 47
NEVER = "59 23 31 2 *"  # 31 February
BAD_ZONE = "Mars/Olympus_Mons"
GARBAGE = "zzqx-cron-zzqx"


def assert_not_echoed(response: httpx.Response, *values: str) -> dict[str, object]:
    assert response.status_code == 422, response.text
    error: dict[str, object] = response.json()["error"]
    said = json.dumps({k: v for k, v in error.items() if k != "request_id"})
    for value in values:
        assert value not in said, said
    return error


async def test_cron_and_timezone_errors_name_the_field_without_the_value(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    url = f"/api/v1/projects/{tenant_a.project_id}/schedules/preview"
    headers = tenant_a.headers(Role.VIEWER)

    bad_hour = await client.get(url, headers=headers, params={"cron": BAD_HOUR})
    error = assert_not_echoed(bad_hour, "47", BAD_HOUR)
    assert error["message"] == "cron: invalid hour field (allowed: 0-23)"
    assert error["details"] == {
        "fields": [{"field": "cron", "message": error["message"]}],
        "cron_field": "hour",
    }

    never = await client.get(url, headers=headers, params={"cron": NEVER})
    error = assert_not_echoed(never, NEVER, "31 2")
    assert str(error["message"]).startswith("cron: ")

    garbage = await client.get(url, headers=headers, params={"cron": f"{GARBAGE} * * * *"})
    assert_not_echoed(garbage, GARBAGE)

    zone = await client.get(
        url, headers=headers, params={"cron": "0 9 * * *", "timezone": BAD_ZONE}
    )
    error = assert_not_echoed(zone, BAD_ZONE, "Olympus")
    assert str(error["message"]).startswith("timezone: unknown timezone")


async def test_body_values_are_not_echoed_either(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    headers = tenant_a.headers(Role.ADMIN)
    base = f"/api/v1/projects/{tenant_a.project_id}"
    queue = await client.post(f"{base}/queues", headers=headers, json={"name": "echo"})
    assert queue.status_code == 201, queue.text
    body = {"name": "n", "queue_id": queue.json()["id"], "cron": BAD_HOUR, "handler": "noop"}
    response = await client.post(f"{base}/schedules", headers=headers, json=body)
    error = assert_not_echoed(response, BAD_HOUR, "47")
    assert error["details"] == {
        "fields": [{"field": "cron", "message": "cron: invalid hour field (allowed: 0-23)"}],
        "cron_field": "hour",
    }
    body = {**body, "cron": "0 9 * * *", "timezone": BAD_ZONE}
    response = await client.post(f"{base}/schedules", headers=headers, json=body)
    assert_not_echoed(response, BAD_ZONE)


def test_withhold_keeps_what_the_client_did_not_send() -> None:
    message = "overlap: Input should be 'allow' or 'skip'"
    assert withhold(message, {"sometimes"}) == message
    assert withhold("cron: invalid minute field '61' (allowed: 0-59)", {"61 * * * *", "61"}) == (
        "cron: invalid minute field (allowed: 0-59)"
    )
    assert withhold("mallory@example.test is already a member", {"mallory@example.test"}) == (
        "(value withheld) is already a member"
    )
