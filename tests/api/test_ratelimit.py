"""Rate limits live in PostgreSQL: 5 auth attempts / 15 min / IP, 1000 enqueues / min / project,
429 with Retry-After, and the count holds across separate API processes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from jobyard.api.ratelimit import enforce_enqueue_limit
from jobyard.core import ratelimit
from jobyard.core.ratelimit import (
    AUTH_LIMIT,
    ENQUEUE_LIMIT,
    LOGIN_IP_LIMIT,
    LOGIN_LIMIT,
    Limit,
    RateLimited,
)
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.errors import ValidationFailed
from jobyard.domain.ids import ProjectId
from tests.api.conftest import FIXTURE_PASSWORD, Tenant
from tests.api.processes import api_process
from tests.api.test_isolation import assert_envelope

API = "/api/v1"


def assert_429(response: httpx.Response, max_retry_after: int) -> None:
    assert_envelope(response, 429, "rate_limited")
    retry_after = int(response.headers["retry-after"])
    assert 1 <= retry_after <= max_retry_after
    assert response.json()["error"]["details"]["retry_after_s"] == retry_after


async def test_the_sixth_login_attempt_is_refused_with_retry_after(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    email = tenant_a.users[Role.OWNER].email
    for attempt in range(LOGIN_LIMIT.limit):
        response = await client.post(
            f"{API}/auth/login", json={"email": email, "password": f"guess-{attempt}"}
        )
        assert response.status_code == 401, (attempt, response.text)
    # The right password does not help once the budget is spent.
    response = await client.post(
        f"{API}/auth/login", json={"email": email, "password": FIXTURE_PASSWORD}
    )
    assert_429(response, AUTH_LIMIT.window_s)
    # Refresh has its own budget, untouched by the login attempts.
    refreshed = await client.post(
        f"{API}/auth/refresh", json={"refresh_token": tenant_a.users[Role.OWNER].refresh_token}
    )
    assert refreshed.status_code == 200


async def test_refresh_attempts_are_limited_too(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    for _ in range(AUTH_LIMIT.limit):
        response = await client.post(f"{API}/auth/refresh", json={"refresh_token": "jyr_nope"})
        assert response.status_code == 401
    response = await client.post(f"{API}/auth/refresh", json={"refresh_token": "jyr_nope"})
    assert_429(response, AUTH_LIMIT.window_s)


async def test_enqueue_limit_counts_each_job_of_a_batch(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    for tenant in (tenant_a, tenant_b):
        await conn.execute(
            "INSERT INTO queues (project_id, name) VALUES (%s, 'default')", (tenant.project_id,)
        )
    jobs = f"{API}/projects/{tenant_a.project_id}/jobs"
    headers = tenant_a.headers(Role.MEMBER)
    too_big = await client.post(
        f"{jobs}/batch",
        headers=headers,
        json={"jobs": [{"handler": "noop"}] * (ENQUEUE_LIMIT.limit + 1)},
    )
    assert_envelope(too_big, 422, "validation_error")
    full = await client.post(
        f"{jobs}/batch", headers=headers, json={"jobs": [{"handler": "noop"}] * ENQUEUE_LIMIT.limit}
    )
    assert full.status_code == 202, full.text[:200]
    one_more = await client.post(jobs, headers=headers, json={"handler": "noop"})
    assert_429(one_more, ENQUEUE_LIMIT.window_s)
    count = await conn.execute("SELECT count(*) AS n FROM jobs WHERE project_id = %s",
                               (tenant_a.project_id,))  # fmt: skip
    assert (await count.fetchone()) == {"n": ENQUEUE_LIMIT.limit}
    # Another project has its own budget.
    other = await client.post(
        f"{API}/projects/{tenant_b.project_id}/jobs",
        headers=tenant_b.headers(Role.MEMBER),
        json={"handler": "noop"},
    )
    assert other.status_code == 202, other.text


async def test_refused_hits_take_nothing_and_a_new_window_starts_fresh(conn: Conn) -> None:
    limit = Limit("test", 3, 60)
    t0 = datetime(2026, 1, 1, 12, 0, 10, tzinfo=UTC)
    assert await ratelimit.take(conn, limit, "k", 2, now=t0) == 2
    with pytest.raises(RateLimited) as refused:
        await ratelimit.take(conn, limit, "k", 2, now=t0)
    assert refused.value.retry_after_s == 50  # until 12:01:00
    assert await ratelimit.take(conn, limit, "k", 1, now=t0) == 3  # the refusal took nothing
    assert await ratelimit.take(conn, limit, "k", 3, now=t0 + timedelta(seconds=50)) == 3
    assert await ratelimit.take(conn, limit, "other", 3, now=t0) == 3
    assert await ratelimit.prune(conn, older_than_s=3600, now=t0 + timedelta(hours=2)) == 3


async def test_enforce_enqueue_limit_refuses_a_batch_no_window_could_hold(conn: Conn) -> None:
    with pytest.raises(ValidationFailed):
        await enforce_enqueue_limit(conn, ProjectId(1), ENQUEUE_LIMIT.limit + 1)


@pytest.mark.slow
async def test_the_login_limit_holds_across_two_api_processes(
    db_url: str, conn: Conn, tenant_a: Tenant, tmp_path: Path
) -> None:
    email = tenant_a.users[Role.VIEWER].email
    with api_process(db_url, tmp_path) as one, api_process(db_url, tmp_path) as two:
        async with httpx.AsyncClient(timeout=30) as http:
            statuses = []
            for attempt in range(AUTH_LIMIT.limit + 2):
                base = (one, two)[attempt % 2].base_url
                response = await http.post(
                    f"{base}{API}/auth/login", json={"email": email, "password": "wrong-guess"}
                )
                statuses.append(response.status_code)
                if response.status_code == 429:
                    assert 1 <= int(response.headers["retry-after"]) <= AUTH_LIMIT.window_s
                    assert response.json()["error"]["code"] == "rate_limited"
    # Attempts 1-5 alternate between the processes and are judged (401); the 6th and 7th are
    # refused by whichever process gets them, because both count in the same table.
    assert statuses == [401] * AUTH_LIMIT.limit + [429, 429], statuses


async def _login(client: httpx.AsyncClient, email: str, password: str) -> int:
    response = await client.post(f"{API}/auth/login", json={"email": email, "password": password})
    return response.status_code


async def test_successful_logins_never_use_up_the_budget(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    """Issue 16 point 8: following docs/API.md (a login per snippet) locked the dashboard out."""
    email = tenant_a.users[Role.OWNER].email
    statuses = [await _login(client, email, FIXTURE_PASSWORD) for _ in range(LOGIN_LIMIT.limit + 3)]
    assert statuses == [200] * (LOGIN_LIMIT.limit + 3)
    # Failures still count, and only those: 5 wrong → the 6th try is refused, even right.
    wrong = [await _login(client, email, "wrong-guess") for _ in range(LOGIN_LIMIT.limit)]
    assert wrong == [401] * LOGIN_LIMIT.limit
    assert await _login(client, email, FIXTURE_PASSWORD) == 429


async def test_failed_logins_on_one_account_do_not_lock_another_from_the_same_ip(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    victim, other = tenant_a.users[Role.VIEWER].email, tenant_a.users[Role.OWNER].email
    for _ in range(LOGIN_LIMIT.limit):
        assert await _login(client, victim, "wrong-guess") == 401
    assert await _login(client, victim, FIXTURE_PASSWORD) == 429
    assert await _login(client, other, FIXTURE_PASSWORD) == 200


async def test_an_ip_spraying_many_accounts_is_limited_too(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    # ASGITransport's client address; 100 failures on other accounts already counted.
    await ratelimit.take(conn, LOGIN_IP_LIMIT, "127.0.0.1", LOGIN_IP_LIMIT.limit)
    response = await client.post(
        f"{API}/auth/login",
        json={"email": tenant_a.users[Role.OWNER].email, "password": FIXTURE_PASSWORD},
    )
    assert_429(response, LOGIN_IP_LIMIT.window_s)


async def _spray(base_url: str, email: str, n: int, forwarded: bool) -> list[int]:
    statuses = []
    async with httpx.AsyncClient(timeout=30) as http:
        for attempt in range(n):
            headers = {"X-Forwarded-For": f"203.0.113.{attempt + 1}"} if forwarded else {}
            response = await http.post(
                f"{base_url}{API}/auth/login",
                json={"email": email, "password": "wrong-guess"},
                headers=headers,
            )
            statuses.append(response.status_code)
    return statuses


@pytest.mark.slow
async def test_x_forwarded_for_is_ignored_unless_the_proxy_is_trusted(
    db_url: str, tenant_a: Tenant, tmp_path: Path
) -> None:
    """Issue 12: uvicorn believed X-Forwarded-For from 127.0.0.1, so rotating it gave every
    attempt a fresh budget (8 wrong logins, 8 × 401, no 429)."""
    n = LOGIN_LIMIT.limit + 3
    with api_process(db_url, tmp_path) as api:
        rotated = await _spray(api.base_url, tenant_a.users[Role.VIEWER].email, n, True)
    assert rotated == [401] * LOGIN_LIMIT.limit + [429] * 3, rotated
    # Behind a trusted proxy (here: 127.0.0.1) each forwarded address is its own client…
    trusted = {"JOBYARD_FORWARDED_ALLOW_IPS": "127.0.0.1"}
    with api_process(db_url, tmp_path, env=trusted) as api:
        email = tenant_a.users[Role.MEMBER].email
        assert await _spray(api.base_url, email, n, True) == [401] * n
        # …and the proxy's own requests (no header) share one budget as before.
        direct = await _spray(api.base_url, email, LOGIN_LIMIT.limit + 1, False)
    assert direct == [401] * LOGIN_LIMIT.limit + [429], direct
