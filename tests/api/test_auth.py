"""Login, refresh rotation with reuse detection and its grace window, logout, password change,
API keys (shown once, work, revoked stop working), members and the last-owner rule."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from jobyard.core import auth as core_auth
from jobyard.core.auth import REFRESH_GRACE_S, SigningKeys
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from tests.api.conftest import FIXTURE_PASSWORD, Tenant
from tests.api.test_isolation import assert_envelope

API = "/api/v1"


async def login(client: httpx.AsyncClient, email: str, password: str) -> httpx.Response:
    return await client.post(f"{API}/auth/login", json={"email": email, "password": password})


async def refresh(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.post(f"{API}/auth/refresh", json={"refresh_token": token})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def scalar(conn: Conn, query: str, *args: Any) -> Any:
    cur = await conn.execute(query, args)  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return next(iter(row.values()))


# ----------------------------------------------------------------------------- login


async def test_login_returns_working_tokens_and_me_lists_my_orgs(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    user = tenant_a.users[Role.ADMIN]
    response = await login(client, user.email.upper(), FIXTURE_PASSWORD)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["token_type"] == "bearer" and body["expires_in"] == 900
    assert body["refresh_token"].startswith("jyr_")
    me = await client.get(f"{API}/auth/me", headers=bearer(body["access_token"]))
    assert me.status_code == 200
    assert me.json()["email"] == user.email
    assert me.json()["orgs"] == [
        {
            "id": tenant_a.org_id,
            "name": tenant_a.org_name,
            "slug": tenant_a.org_slug,
            "role": "admin",
        }
    ]


async def test_wrong_password_and_unknown_email_get_the_same_answer(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    wrong = await login(client, tenant_a.users[Role.OWNER].email, "not-the-password")
    unknown = await login(client, "nobody@example.test", "not-the-password")
    for response in (wrong, unknown):
        err = assert_envelope(response, 401, "unauthenticated")
        assert err["message"] == "invalid email or password"
        assert "not-the-password" not in response.text


async def test_login_validation_names_the_field_and_echoes_no_input(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        f"{API}/auth/login", json={"email": "no-at-sign", "password": "s3cret-value"}
    )
    err = assert_envelope(response, 422, "validation_error")
    assert [f["field"] for f in err["details"]["fields"]] == ["email"]
    assert "s3cret-value" not in response.text and "no-at-sign" not in response.text


async def test_a_deactivated_user_can_no_longer_use_their_tokens(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    user = tenant_a.users[Role.MEMBER]
    await conn.execute("UPDATE users SET is_active = false WHERE id = %s", (user.id,))
    assert (await client.get(f"{API}/auth/me", headers=user.headers)).status_code == 401
    assert (await refresh(client, user.refresh_token)).status_code == 401
    assert (await login(client, user.email, FIXTURE_PASSWORD)).status_code == 401


# ----------------------------------------------------------------------------- refresh


async def test_refresh_rotates_and_replaying_a_rotated_token_revokes_the_family(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    user = tenant_a.users[Role.VIEWER]
    first = await refresh(client, user.refresh_token)
    assert first.status_code == 200, first.text
    successor = first.json()["refresh_token"]
    assert successor != user.refresh_token
    # Move the rotation out of the grace window, then replay the used token: theft assumed.
    await conn.execute(
        "UPDATE refresh_tokens SET rotated_at = rotated_at - make_interval(secs => %s)"
        " WHERE rotated_at IS NOT NULL",
        (REFRESH_GRACE_S + 1,),
    )
    replay = await refresh(client, user.refresh_token)
    err = assert_envelope(replay, 401, "unauthenticated")
    assert err["details"] == {"reason": "refresh_token_reused"}
    # The whole family is gone: the successor, and every access token of the session.
    assert (await refresh(client, successor)).status_code == 401
    for token in (user.access_token, first.json()["access_token"]):
        assert (await client.get(f"{API}/auth/me", headers=bearer(token))).status_code == 401
    live = await scalar(
        conn, "SELECT count(*) FROM refresh_tokens WHERE user_id = %s AND revoked_at IS NULL",
        user.id,
    )  # fmt: skip
    assert live == 0
    # Other users' sessions are untouched.
    other = tenant_a.users[Role.OWNER]
    assert (await client.get(f"{API}/auth/me", headers=other.headers)).status_code == 200


async def test_a_retry_within_the_grace_window_gets_the_same_successor(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    """A lost refresh response must not log the user out: retrying with the same token inside
    the grace window returns the same successor, and the session carries on."""
    user = tenant_a.users[Role.MEMBER]
    first = await refresh(client, user.refresh_token)
    retry = await refresh(client, user.refresh_token)
    assert first.status_code == retry.status_code == 200, retry.text
    assert first.json()["refresh_token"] == retry.json()["refresh_token"]
    nxt = await refresh(client, retry.json()["refresh_token"])
    assert nxt.status_code == 200
    assert (
        await client.get(f"{API}/auth/me", headers=bearer(nxt.json()["access_token"]))
    ).is_success


async def test_concurrent_refreshes_of_one_token_agree(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    """Two tabs refreshing at once: the row lock queues them, both get the same successor."""
    user = tenant_a.users[Role.MEMBER]
    responses = await asyncio.gather(*(refresh(client, user.refresh_token) for _ in range(2)))
    assert [r.status_code for r in responses] == [200, 200], [r.text for r in responses]
    assert len({r.json()["refresh_token"] for r in responses}) == 1


async def test_replaying_a_token_whose_successor_was_used_is_reuse_even_in_grace(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    user = tenant_a.users[Role.MEMBER]
    first = await refresh(client, user.refresh_token)
    second = await refresh(client, first.json()["refresh_token"])
    assert second.status_code == 200
    replay = await refresh(client, user.refresh_token)
    assert_envelope(replay, 401, "unauthenticated")
    assert (await refresh(client, second.json()["refresh_token"])).status_code == 401


async def test_expired_and_unknown_refresh_tokens_are_refused(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    user = tenant_a.users[Role.VIEWER]
    await conn.execute(
        "UPDATE refresh_tokens SET expires_at = now() - interval '1 second' WHERE user_id = %s",
        (user.id,),
    )
    assert_envelope(await refresh(client, user.refresh_token), 401, "unauthenticated")
    assert_envelope(await refresh(client, "jyr_unknown"), 401, "unauthenticated")
    assert_envelope(await refresh(client, user.access_token), 401, "unauthenticated")


async def test_refresh_tokens_are_stored_only_as_hashes(conn: Conn, tenant_a: Tenant) -> None:
    cur = await conn.execute("SELECT token_hash FROM refresh_tokens")
    stored = [bytes(r["token_hash"]) for r in await cur.fetchall()]
    for user in tenant_a.users.values():
        assert core_auth.token_hash(user.refresh_token) in stored
        assert all(user.refresh_token.encode() not in s for s in stored)


async def test_the_successor_depends_on_the_server_key(signing_keys: SigningKeys) -> None:
    other = SigningKeys.derive("a-different-secret-0123456789abcdef0123")
    token = core_auth.new_refresh_token()
    assert core_auth.successor_of(signing_keys, token) == core_auth.successor_of(
        signing_keys, token
    )
    assert core_auth.successor_of(signing_keys, token) != core_auth.successor_of(other, token)


# ----------------------------------------------------------------------------- logout, password


async def test_logout_ends_the_session_at_once(client: httpx.AsyncClient, tenant_a: Tenant) -> None:
    user = tenant_a.users[Role.ADMIN]
    response = await client.post(f"{API}/auth/logout", headers=user.headers)
    assert response.status_code == 204
    assert_envelope(
        await client.get(f"{API}/auth/me", headers=user.headers), 401, "unauthenticated"
    )
    assert_envelope(await refresh(client, user.refresh_token), 401, "unauthenticated")
    # Another session of another user is unaffected.
    assert (await client.get(f"{API}/auth/me", headers=tenant_a.headers(Role.OWNER))).is_success


async def test_password_change_ends_other_sessions_and_checks_the_old_password(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    user = tenant_a.users[Role.MEMBER]
    other = await login(client, user.email, FIXTURE_PASSWORD)
    wrong = await client.post(
        f"{API}/auth/password",
        headers=user.headers,
        json={"current_password": "nope", "new_password": "a-brand-new-password"},
    )
    err = assert_envelope(wrong, 403, "forbidden")
    assert err["details"] == {"field": "current_password"}
    ok = await client.post(
        f"{API}/auth/password",
        headers=user.headers,
        json={"current_password": FIXTURE_PASSWORD, "new_password": "a-brand-new-password"},
    )
    assert ok.status_code == 204, ok.text
    assert (await client.get(f"{API}/auth/me", headers=user.headers)).is_success
    stale = bearer(other.json()["access_token"])
    assert (await client.get(f"{API}/auth/me", headers=stale)).status_code == 401
    assert (await login(client, user.email, FIXTURE_PASSWORD)).status_code == 401
    assert (await login(client, user.email, "a-brand-new-password")).status_code == 200


# ----------------------------------------------------------------------------- API keys


async def test_api_key_is_shown_once_works_and_stops_when_revoked(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    keys_path = f"{API}/projects/{tenant_a.project_id}/api-keys"
    created = await client.post(
        keys_path, headers=tenant_a.headers(Role.ADMIN), json={"name": "deploy", "role": "viewer"}
    )
    assert created.status_code == 201, created.text
    secret = created.json()["key"]
    assert secret.startswith("jy_") and len(secret) >= 40
    assert created.json()["prefix"] == secret[:9]
    listed = await client.get(keys_path, headers=tenant_a.headers(Role.ADMIN))
    assert secret not in listed.text and "key_hash" not in listed.text
    assert all("key" not in item for item in listed.json()["items"])
    stored = await scalar(conn, "SELECT key_hash FROM api_keys WHERE id = %s", created.json()["id"])
    assert bytes(stored) == core_auth.token_hash(secret)

    project_path = f"{API}/projects/{tenant_a.project_id}"
    for headers in ({"X-API-Key": secret}, bearer(secret)):
        response = await client.get(project_path, headers=headers)
        assert response.status_code == 200, response.text
    used = await scalar(
        conn, "SELECT last_used_at FROM api_keys WHERE id = %s", created.json()["id"]
    )
    assert used is not None

    revoked = await client.delete(
        f"{keys_path}/{created.json()['id']}", headers=tenant_a.headers(Role.ADMIN)
    )
    assert revoked.status_code == 204
    response = await client.get(project_path, headers={"X-API-Key": secret})
    assert_envelope(response, 401, "unauthenticated")


async def test_api_keys_reach_only_their_own_project(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    second = await scalar(
        conn,
        "INSERT INTO projects (org_id, name, slug) VALUES (%s, 'Second', 'second') RETURNING id",
        tenant_a.org_id,
    )
    response = await client.get(
        f"{API}/projects/{second}", headers=tenant_a.key_headers(Role.ADMIN)
    )
    assert_envelope(response, 404, "not_found")
    # The owner (a user) reaches both projects of the org.
    assert (await client.get(f"{API}/projects/{second}", headers=tenant_a.headers())).is_success


async def test_expired_api_key_is_refused(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await conn.execute("UPDATE api_keys SET expires_at = now() - interval '1 second'")
    response = await client.get(
        f"{API}/projects/{tenant_a.project_id}", headers=tenant_a.key_headers(Role.VIEWER)
    )
    assert_envelope(response, 401, "unauthenticated")


async def test_an_owner_role_key_cannot_be_created(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    response = await client.post(
        f"{API}/projects/{tenant_a.project_id}/api-keys",
        headers=tenant_a.headers(Role.OWNER),
        json={"name": "root", "role": "owner"},
    )
    err = assert_envelope(response, 422, "validation_error")
    assert err["details"]["fields"][0]["field"] == "role"


# ----------------------------------------------------------------------------- orgs and members


async def test_creating_an_org_makes_the_creator_its_owner(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    headers = tenant_a.headers(Role.VIEWER)
    created = await client.post(
        f"{API}/orgs", headers=headers, json={"name": "Mine", "slug": "mine"}
    )
    assert created.status_code == 201, created.text
    assert created.json()["role"] == "owner"
    dup = await client.post(f"{API}/orgs", headers=headers, json={"name": "Again", "slug": "mine"})
    err = assert_envelope(dup, 409, "conflict")
    assert err["details"] == {"field": "slug"}
    listed = await client.get(f"{API}/orgs", headers=headers)
    assert [o["slug"] for o in listed.json()["items"]] == [tenant_a.org_slug, "mine"]


async def test_the_last_owner_can_be_neither_demoted_nor_removed(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    owner = tenant_a.users[Role.OWNER]
    member_path = f"{API}/orgs/{tenant_a.org_id}/members/{owner.id}"
    demote = await client.patch(member_path, headers=owner.headers, json={"role": "admin"})
    assert_envelope(demote, 409, "conflict")
    remove = await client.delete(member_path, headers=owner.headers)
    assert_envelope(remove, 409, "conflict")
    # With a second owner, the first may step down.
    admin = tenant_a.users[Role.ADMIN]
    promote = await client.patch(
        f"{API}/orgs/{tenant_a.org_id}/members/{admin.id}",
        headers=owner.headers,
        json={"role": "owner"},
    )
    assert promote.status_code == 200, promote.text
    assert (
        await client.patch(member_path, headers=owner.headers, json={"role": "admin"})
    ).is_success


async def test_two_owners_demoting_each_other_at_once_leave_one_owner(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    owner, admin = tenant_a.users[Role.OWNER], tenant_a.users[Role.ADMIN]
    await conn.execute(
        "UPDATE organization_members SET role = 'owner' WHERE user_id = %s", (admin.id,)
    )

    async def demote(actor: Any, target: Any) -> httpx.Response:
        return await client.patch(
            f"{API}/orgs/{tenant_a.org_id}/members/{target.id}",
            headers=actor.headers,
            json={"role": "member"},
        )

    results = await asyncio.gather(demote(owner, admin), demote(admin, owner))
    statuses = sorted(r.status_code for r in results)
    assert statuses in ([200, 403], [200, 409]), [r.text for r in results]
    owners = await scalar(
        conn,
        "SELECT count(*) FROM organization_members WHERE org_id = %s AND role = 'owner'",
        tenant_a.org_id,
    )
    assert owners == 1


async def test_admins_cannot_touch_owners_or_grant_ownership(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    admin = tenant_a.headers(Role.ADMIN)
    owner_id = tenant_a.users[Role.OWNER].id
    base = f"{API}/orgs/{tenant_a.org_id}/members"
    checks = [
        await client.patch(f"{base}/{owner_id}", headers=admin, json={"role": "viewer"}),
        await client.delete(f"{base}/{owner_id}", headers=admin),
        await client.patch(
            f"{base}/{tenant_a.users[Role.VIEWER].id}", headers=admin, json={"role": "owner"}
        ),
        await client.post(
            f"{API}/orgs/{tenant_a.org_id}/invitations",
            headers=admin,
            json={"email": "x@example.test", "role": "owner"},
        ),
    ]
    for response in checks:
        assert_envelope(response, 403, "forbidden")
    ok = await client.patch(
        f"{base}/{tenant_a.users[Role.VIEWER].id}", headers=admin, json={"role": "member"}
    )
    assert ok.status_code == 200


async def test_member_list_pages_by_cursor_without_gaps_or_repeats(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    seen: list[int] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        response = await client.get(
            f"{API}/orgs/{tenant_a.org_id}/members", headers=tenant_a.headers(), params=params
        )
        assert response.status_code == 200, response.text
        seen += [m["user_id"] for m in response.json()["items"]]
        cursor = response.json()["next_cursor"]
        pages += 1
        if cursor is None:
            break
    assert pages == 2
    assert seen == sorted({u.id for u in tenant_a.users.values()})
    for bad in ("!!!", "e30", "WzEsIngiXQ", "a" * 600):
        response = await client.get(
            f"{API}/orgs/{tenant_a.org_id}/members",
            headers=tenant_a.headers(),
            params={"cursor": bad},
        )
        err = assert_envelope(response, 422, "validation_error")
        assert err["details"]["fields"][0]["field"] in ("cursor", "query.cursor")
