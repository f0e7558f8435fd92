"""Dashboard rules checked over ASGI (no browser): CSRF, roles, tenants, sessions, bad input."""

from __future__ import annotations

import httpx

from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from tests.api.conftest import FIXTURE_PASSWORD
from tests.web.conftest import Seed, scalar, sign_in


async def _status(conn: Conn, job_id: int) -> str:
    return str(await scalar(conn, "SELECT status FROM jobs WHERE id = %s", job_id))


async def test_signed_out_pages_redirect_to_login_and_partials_answer_401(
    client: httpx.AsyncClient, seed: Seed
) -> None:
    page = await client.get(f"/p/{seed.project}")
    assert page.status_code == 303
    assert page.headers["location"] == f"/login?next=/p/{seed.project}"
    assert (await client.get(f"/partials/p/{seed.project}/overview")).status_code == 401


async def test_login_sets_httponly_samesite_cookies(client: httpx.AsyncClient, seed: Seed) -> None:
    page = await client.get("/login")
    from tests.web.conftest import form_token

    response = await client.post(
        "/login",
        data={
            "email": seed.a.users[Role.OWNER].email,
            "password": "fixture-password-123",
            "csrf_token": form_token(page.text),
        },
    )
    assert response.status_code == 303
    cookies = response.headers.get_list("set-cookie")
    session = [c for c in cookies if c.startswith(("jy_access=", "jy_refresh="))]
    assert len(session) == 2, cookies
    for c in session:
        lowered = c.lower()
        assert "httponly" in lowered and "samesite=lax" in lowered and "path=/" in lowered, c
        assert "secure" not in lowered  # plain http here; Secure is set when served over https


async def test_wrong_password_shows_the_login_page_again(
    client: httpx.AsyncClient, seed: Seed
) -> None:
    from tests.web.conftest import form_token

    page = await client.get("/login")
    response = await client.post(
        "/login",
        data={"email": seed.a.users[Role.OWNER].email, "password": "nope",
              "csrf_token": form_token(page.text)},
    )  # fmt: skip
    assert response.status_code == 401
    assert "Invalid email or password." in response.text
    assert "jy_access" not in response.headers.get("set-cookie", "")


async def test_login_is_rate_limited_with_the_api_limit(
    client: httpx.AsyncClient, seed: Seed
) -> None:
    from tests.web.conftest import form_token

    statuses = []
    for _ in range(6):
        page = await client.get("/login")
        response = await client.post(
            "/login",
            data={"email": "nobody@example.test", "password": "x",
                  "csrf_token": form_token(page.text)},
        )  # fmt: skip
        statuses.append(response.status_code)
    assert statuses == [401] * 5 + [429]
    assert "Too many sign-in attempts" in response.text


async def test_post_without_csrf_token_is_refused_and_changes_nothing(
    client: httpx.AsyncClient, seed: Seed, conn: Conn
) -> None:
    await sign_in(client, seed.a, Role.OWNER)
    url = f"/p/{seed.project}/jobs/{seed.queued_job_id}/cancel"
    missing = await client.post(url, data={})
    wrong = await client.post(url, data={"csrf_token": "0" * 64})
    assert (missing.status_code, wrong.status_code) == (403, 403)
    assert "Not allowed" in missing.text
    assert await _status(conn, seed.queued_job_id) == "queued"


async def test_post_from_another_origin_is_refused_even_with_the_token(
    client: httpx.AsyncClient, seed: Seed, conn: Conn
) -> None:
    token = await sign_in(client, seed.a, Role.OWNER)
    url = f"/p/{seed.project}/queues/{seed.queues['default']}/pause"
    evil = await client.post(
        url, data={"csrf_token": token}, headers={"Origin": "http://evil.test"}
    )
    no_origin = await client.post(
        url, data={"csrf_token": token}, headers={"Origin": "", "Referer": "http://evil.test/x"}
    )
    assert (evil.status_code, no_origin.status_code) == (403, 403)
    paused = await scalar(
        conn, "SELECT is_paused FROM queues WHERE id = %s", seed.queues["default"]
    )
    assert paused is False
    ok = await client.post(url, data={"csrf_token": token})
    assert ok.status_code == 303


async def test_a_viewers_forged_posts_are_refused(
    client: httpx.AsyncClient, seed: Seed, conn: Conn
) -> None:
    token = await sign_in(client, seed.a, Role.VIEWER)
    p = f"/p/{seed.project}"
    for url, data in [
        (f"{p}/jobs/{seed.queued_job_id}/cancel", {}),
        (f"{p}/queues/{seed.queues['default']}/pause", {}),
        (f"{p}/dlq/{seed.dlq_id}/payload", {"payload": '{"n": 2}'}),
        (f"{p}/dlq/{seed.dlq_id}/replay", {"payload": '{"n": 2}'}),
        (f"{p}/dlq/{seed.dlq_id}/delete", {}),
    ]:
        response = await client.post(url, data={"csrf_token": token, **data})
        assert response.status_code == 403, (url, response.status_code)
    assert await _status(conn, seed.queued_job_id) == "queued"
    assert await scalar(conn, "SELECT count(*) FROM queues WHERE is_paused") == 0
    letter = await scalar(conn, "SELECT payload FROM dead_letter_jobs WHERE id = %s", seed.dlq_id)
    assert letter == {"n": 1}
    assert await scalar(conn, "SELECT replay_job_id FROM dead_letter_jobs WHERE id = %s",
                        seed.dlq_id) is None  # fmt: skip


async def test_a_member_cannot_pause_or_delete_but_can_cancel(
    client: httpx.AsyncClient, seed: Seed, conn: Conn
) -> None:
    token = await sign_in(client, seed.a, Role.MEMBER)
    p = f"/p/{seed.project}"
    pause = await client.post(f"{p}/queues/{seed.queues['default']}/pause",
                              data={"csrf_token": token})  # fmt: skip
    delete = await client.post(f"{p}/dlq/{seed.dlq_id}/delete", data={"csrf_token": token})
    cancel = await client.post(f"{p}/jobs/{seed.queued_job_id}/cancel", data={"csrf_token": token})
    assert (pause.status_code, delete.status_code, cancel.status_code) == (403, 403, 303)
    assert await _status(conn, seed.queued_job_id) == "cancelled"
    assert await scalar(conn, "SELECT count(*) FROM dead_letter_jobs") == 1


async def test_another_orgs_project_is_404_like_a_missing_one(
    client: httpx.AsyncClient, seed: Seed
) -> None:
    await sign_in(client, seed.a, Role.OWNER)
    theirs = await client.get(f"/p/{seed.b.project_id}")
    missing = await client.get("/p/4000000000000000000")
    garbage = await client.get("/p/abc")
    assert (theirs.status_code, missing.status_code, garbage.status_code) == (404, 404, 404)
    assert seed.b.project_name not in theirs.text and "b-only-queue" not in theirs.text
    partial = await client.get(f"/partials/p/{seed.b.project_id}/overview")
    assert partial.status_code == 404
    job = await client.get(f"/p/{seed.project}/jobs/999999")
    assert job.status_code == 404


async def test_logout_revokes_the_session_cookies(client: httpx.AsyncClient, seed: Seed) -> None:
    token = await sign_in(client, seed.a, Role.OWNER)
    kept = dict(client.cookies)
    out = await client.post("/logout", data={"csrf_token": token})
    assert out.status_code == 303 and out.headers["location"] == "/login"
    # The old cookies, replayed as-is, no longer open anything (the family is revoked).
    client.cookies.clear()
    for name, value in kept.items():
        client.cookies.set(name, value)
    again = await client.get(f"/p/{seed.project}")
    assert again.status_code == 303 and again.headers["location"].startswith("/login")


async def test_an_expired_access_cookie_is_renewed_from_the_refresh_cookie(
    client: httpx.AsyncClient, seed: Seed
) -> None:
    await sign_in(client, seed.a, Role.OWNER)
    refresh = client.cookies["jy_refresh"]
    client.cookies.clear()
    client.cookies.set("jy_refresh", refresh)
    page = await client.get(f"/p/{seed.project}")
    assert page.status_code == 200
    renewed = page.headers.get_list("set-cookie")
    assert any(c.startswith("jy_access=") for c in renewed)
    assert any(c.startswith("jy_refresh=") and refresh not in c for c in renewed)


async def test_explorer_bad_filters_are_named_not_crashed(
    client: httpx.AsyncClient, seed: Seed
) -> None:
    await sign_in(client, seed.a, Role.OWNER)
    p = f"/p/{seed.project}/jobs"
    for query, field in [("status=exploded", "status"), ("from=yesterday", "from"),
                         ("before=-1", "before"), ("queue=" + "x" * 300, "queue")]:  # fmt: skip
        response = await client.get(f"{p}?{query}")
        assert response.status_code == 422, query
        assert f"{field}:" in response.text, query


async def test_dlq_payload_over_64_kb_is_refused_on_the_page(
    client: httpx.AsyncClient, seed: Seed, conn: Conn
) -> None:
    token = await sign_in(client, seed.a, Role.MEMBER)
    big = '{"blob": "' + "x" * (70 * 1024) + '"}'
    response = await client.post(
        f"/p/{seed.project}/dlq/{seed.dlq_id}/payload", data={"csrf_token": token, "payload": big}
    )
    assert response.status_code == 422
    assert "payload is larger than 64 KB" in response.text
    letter = await scalar(conn, "SELECT payload FROM dead_letter_jobs WHERE id = %s", seed.dlq_id)
    assert letter == {"n": 1}


async def test_pages_carry_a_strict_content_security_policy(
    client: httpx.AsyncClient, seed: Seed
) -> None:
    await sign_in(client, seed.a, Role.OWNER)
    for path in ("", "/queues", "/jobs", "/workers", "/schedules", "/dlq",
                 f"/jobs/{seed.failed_job_id}", f"/queues/{seed.queues['default']}"):  # fmt: skip
        response = await client.get(f"/p/{seed.project}{path}")
        assert response.status_code == 200, (path, response.text[:500])
        assert "script-src 'self'" in response.headers["content-security-policy"]


async def test_logins_through_the_api_never_lock_the_dashboard_out(
    client: httpx.AsyncClient, seed: Seed
) -> None:
    """Issue 16 point 8: docs/API.md logs in once per snippet; after a few snippets the
    dashboard answered 429 to the same person on the same machine."""
    email = seed.a.users[Role.OWNER].email
    for _ in range(8):
        api = await client.post(
            "/api/v1/auth/login", json={"email": email, "password": FIXTURE_PASSWORD}
        )
        assert api.status_code == 200
    await sign_in(client, seed.a, Role.OWNER)  # asserts the 303 of a successful sign-in
