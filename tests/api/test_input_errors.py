"""Bad input found by a user against a running API: each is refused with the documented status
and a message that reads whole (values withheld from messages must not leave broken sentences).

- a body that is not JSON text → 400 bad_request saying what and where; not sent as JSON → 415;
- timestamps without a UTC offset in list and bulk filters → the same 422 as run_at;
- a retry override whose base_delay_ms exceeds max_delay_ms → the retry policy's 422;
- JSON booleans in integer fields → 422 (floats keep their lax behaviour);
- 1e400 in a payload → "out of range for a double";
- conflict and not-found messages that do not depend on the value withheld.
"""

from __future__ import annotations

import httpx
import pytest

from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.errors import ValidationFailed
from jobyard.worker.app import App
from jobyard.worker.context import JobContext
from tests.api.conftest import Tenant
from tests.api.engine_helpers import base, error_fields, error_of, make_queue, owner, scalar
from tests.api.test_isolation import assert_envelope

API = "/api/v1"
JSON = {"Content-Type": "application/json"}


async def test_a_body_that_is_not_valid_json_is_400_saying_what_and_where(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/jobs", {**owner(tenant_a), **JSON}
    broken = await client.post(url, content=b'{"handler": ', headers=h)
    err = assert_envelope(broken, 400, "bad_request")
    assert err["message"] == ("the body is not valid JSON: Expecting value at line 1 column 13"), (
        err
    )
    assert err["details"] == {"line": 1, "column": 13}
    two_lines = await client.post(url, content=b'{"handler": "noop",\n "x" 1}', headers=h)
    err = assert_envelope(two_lines, 400, "bad_request")
    assert err["message"].endswith("at line 2 column 6"), err
    unterminated = await client.post(url, content=b'{"handler": "no', headers=h)
    err = assert_envelope(unterminated, 400, "bad_request")
    assert err["message"] == (
        "the body is not valid JSON: Unterminated string starting at line 1 column 13"
    ), err
    not_utf8 = await client.post(url, content=b'{"handler": "caf\xe9"}', headers=h)
    err = assert_envelope(not_utf8, 400, "bad_request")
    assert err["message"] == "the body is not JSON text: it is not valid UTF-8 (at byte 16)"
    deep = await client.post(url, content=b"[" * 5000 + b"]" * 5000, headers=h)
    err = assert_envelope(deep, 400, "bad_request")
    assert err["message"] == "the body could not be parsed as JSON: it is nested too deeply"
    login = await client.post(f"{API}/auth/login", content=b"{not json", headers=JSON)
    assert_envelope(login, 400, "bad_request")
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 0


async def test_a_body_sent_without_a_json_content_type_is_415_saying_what_to_send(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/jobs", owner(tenant_a)
    form = {"Content-Type": "application/x-www-form-urlencoded"}  # curl -d's default
    for headers in (form, {"Content-Type": "text/plain"}, {}):
        r = await client.post(url, content=b'{"handler":"noop"}', headers={**h, **headers})
        err = assert_envelope(r, 415, "unsupported_media_type")
        assert err["message"] == "the body must be JSON: send Content-Type: application/json"
    # JSON media types are parsed (charset and +json suffixes included).
    for media in ("application/json; charset=utf-8", "application/vnd.jobyard+json"):
        r = await client.post(
            url, content=b'{"handler":"noop"}', headers={**h, "Content-Type": media}
        )
        assert r.status_code == 202, (media, r.text)
    # A JSON body that is wrong is still a 422 naming the field.
    r = await client.post(url, json={"handler": "noop", "priority": "high"}, headers=h)
    assert error_fields(error_of(r, 422, "validation_error")) == {"priority"}
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 2


async def test_filter_timestamps_without_an_offset_are_the_run_at_422(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/jobs", owner(tenant_a)
    run_at = error_of(
        await client.post(url, json={"handler": "h", "run_at": "2030-01-01T09:00:00"}, headers=h),
        422,
        "validation_error",
    )
    offset_rule = run_at["details"]["fields"][0]["message"]
    assert "timezone offset" in offset_rule
    for naive in ("2020-01-01T00:00:00", "2030-01-01"):
        for name in ("created_from", "created_to"):
            r = await client.get(url, params={name: naive}, headers=h)
            err = error_of(r, 422, "validation_error")
            assert err["details"]["fields"] == [
                {"field": f"query.{name}", "message": offset_rule}
            ], err
            bulk = await client.post(
                f"{url}/bulk", json={"action": "cancel", "filter": {name: naive}}, headers=h
            )
            err = error_of(bulk, 422, "validation_error")
            assert err["details"]["fields"] == [
                {"field": f"filter.{name}", "message": offset_rule}
            ], err
    r = await client.get(url, params={"created_from": "2020-01-01T00:00:00+02:00"}, headers=h)
    assert r.status_code == 200, r.text
    batch = await client.post(
        f"{url}/batch",
        json={"jobs": [{"handler": "h", "run_at": "2030-01-01T09:00:00"}]},
        headers=h,
    )
    assert error_fields(error_of(batch, 422, "validation_error")) == {"jobs[0].run_at"}


async def test_a_retry_override_follows_the_retry_policy_delay_rule(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    h = owner(tenant_a)
    delays = {"backoff": "fixed", "base_delay_ms": 5000, "max_delay_ms": 10}
    policy = await client.post(
        f"{base(tenant_a)}/retry-policies", json={"name": "p", **delays}, headers=h
    )
    policy_err = error_of(policy, 422, "validation_error")
    assert policy_err["details"]["fields"] == [
        {"field": "base_delay_ms", "message": "base_delay_ms must not exceed max_delay_ms"}
    ]
    # What docs/API.md says of a PATCH: both delays out of order → 422 naming base_delay_ms;
    # one delay crossing the stored other → 409 naming the delay sent.
    created = await client.post(f"{base(tenant_a)}/retry-policies", json={"name": "p"}, headers=h)
    url = f"{base(tenant_a)}/retry-policies/{created.json()['id']}"
    both = await client.patch(url, json={"base_delay_ms": 5000, "max_delay_ms": 10}, headers=h)
    assert error_fields(error_of(both, 422, "validation_error")) == {"base_delay_ms"}
    one = await client.patch(url, json={"max_delay_ms": 1}, headers=h)
    assert error_fields(error_of(one, 409, "conflict")) == {"max_delay_ms"}
    job = await client.post(
        f"{base(tenant_a)}/jobs", json={"handler": "noop", "retry": delays}, headers=h
    )
    err = error_of(job, 422, "validation_error")
    assert err["details"]["fields"] == [
        {"field": "retry.base_delay_ms", "message": "base_delay_ms must not exceed max_delay_ms"}
    ]
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 0
    equal = {"base_delay_ms": 10, "max_delay_ms": 10}
    ok = await client.post(
        f"{base(tenant_a)}/jobs", json={"handler": "noop", "retry": equal}, headers=h
    )
    assert ok.status_code == 202, ok.text


def test_the_sdk_refuses_such_an_override_at_decoration_time() -> None:
    app = App(project="p", database_url="postgresql://unused")
    with pytest.raises(ValidationFailed) as caught:

        @app.task(retry={"backoff": "fixed", "base_delay_ms": 5000, "max_delay_ms": 10})
        def noop(ctx: JobContext) -> None:
            pass

    assert caught.value.details["field"] == "retry.base_delay_ms"
    assert "base_delay_ms must not exceed max_delay_ms" in caught.value.message


async def test_booleans_are_not_integers_in_enqueue_bodies(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/jobs", owner(tenant_a)
    for name in ("priority", "max_attempts", "timeout_ms", "delay_ms"):
        r = await client.post(url, json={"handler": "noop", name: True}, headers=h)
        assert error_fields(error_of(r, 422, "validation_error")) == {name}, name
        r = await client.post(
            f"{url}/batch", json={"jobs": [{"handler": "noop", name: True}]}, headers=h
        )
        if name != "delay_ms":  # a batch item has no delay_ms
            assert error_fields(error_of(r, 422, "validation_error")) == {f"jobs[0].{name}"}
    r = await client.post(url, json={"handler": "noop", "depends_on": [True]}, headers=h)
    assert error_fields(error_of(r, 422, "validation_error")) == {"depends_on[0]"}
    r = await client.post(
        url, json={"handler": "noop", "retry": {"base_delay_ms": False}}, headers=h
    )
    assert error_fields(error_of(r, 422, "validation_error")) == {"retry.base_delay_ms"}
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 0
    # Floats keep what they did: an integral 5.0 is 5, 5.5 is refused.
    r = await client.post(url, json={"handler": "noop", "priority": 5.0}, headers=h)
    assert r.status_code == 202 and r.json()["priority"] == 5, r.text
    r = await client.post(url, json={"handler": "noop", "priority": 5.5}, headers=h)
    assert error_fields(error_of(r, 422, "validation_error")) == {"priority"}


async def test_a_payload_number_beyond_a_double_says_out_of_range(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    url, h = f"{base(tenant_a)}/jobs", {**owner(tenant_a), **JSON}
    r = await client.post(url, content=b'{"handler": "noop", "payload": {"n": 1e400}}', headers=h)
    err = error_of(r, 422, "validation_error")
    assert "out of range for a double" in err["message"], err
    r = await client.post(url, content=b'{"handler": "noop", "payload": {"n": NaN}}', headers=h)
    err = error_of(r, 422, "validation_error")
    assert "NaN and Infinity are not JSON numbers" in err["message"], err
    assert "out of range" not in err["message"]
    # JSON may escape a lone surrogate; no UTF-8 text (so no jsonb) can hold one.
    body = b'{"handler": "noop", "payload": {"s": "\\ud800"}}'
    err = error_of(await client.post(url, content=body, headers=h), 422, "validation_error")
    assert "lone surrogate" in err["message"], err
    # At most 100 levels of arrays and objects: a deeper payload was stored, then answered with
    # a 500 (pydantic's writer stops at ~254 levels), as was every later read of the job.
    for levels, status in ((100, 202), (101, 422)):
        nested = b'{"handler": "noop", "payload": ' + b"[" * levels + b"]" * levels + b"}"
        r = await client.post(url, content=nested, headers=h)
        assert r.status_code == status, r.text
    assert "nested more than 100 levels deep" in error_of(r, 422, "validation_error")["message"]


async def test_conflict_and_not_found_messages_read_whole_without_the_value(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    queue = await make_queue(client, tenant_a)
    h = owner(tenant_a)
    schedule = {
        "name": "nightly report",
        "queue_id": queue["id"],
        "cron": "30 2 * * *",
        "timezone": "Europe/London",
        "handler": "report",
    }
    assert (await client.post(f"{base(tenant_a)}/schedules", json=schedule, headers=h)).is_success
    r = await client.post(f"{base(tenant_a)}/schedules", json=schedule, headers=h)
    assert error_of(r, 409, "conflict")["message"] == (
        "name: a schedule with this name already exists"
    )

    projects = f"{API}/orgs/{tenant_a.org_id}/projects"
    body = {"name": "Reports", "slug": "reports-eu"}
    assert (await client.post(projects, json=body, headers=h)).status_code == 201
    r = await client.post(projects, json=body, headers=h)
    assert error_of(r, 409, "conflict")["message"] == (
        "this organization already has a project with this slug"
    )

    member = tenant_a.users[Role.MEMBER].email
    r = await client.post(
        f"{API}/orgs/{tenant_a.org_id}/invitations",
        headers=tenant_a.headers(Role.ADMIN),
        json={"email": member, "role": "member"},
    )
    assert error_of(r, 409, "conflict")["message"] == (
        "someone with this email already belongs to this organization"
    )

    workflows = f"{base(tenant_a)}/workflows"
    steps = [
        {"key": "extract", "handler": "noop"},
        {"key": "transform", "handler": "noop", "after": ["extract"]},
        {"key": "extract", "handler": "noop"},
    ]
    r = await client.post(workflows, json={"steps": steps}, headers=h)
    err = error_of(r, 422, "validation_error")
    assert err["message"] == "step keys must be unique: steps[2].key repeats steps[0].key"
    assert error_fields(err) == {"steps[2].key"}
    steps = [
        {"key": "extract", "handler": "noop"},
        {"key": "transform", "handler": "noop", "after": ["extract", "missing-step"]},
    ]
    r = await client.post(workflows, json={"steps": steps}, headers=h)
    err = error_of(r, 404, "not_found")
    assert err["message"] == "steps[1].after[1] names a key that no step has (unknown steps)"
    assert err["details"] == {"field": "steps[1].after[1]"}
