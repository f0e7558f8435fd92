"""Issue 12: account pre-hijacking and enumeration. People join an organization only by
redeeming a single-use, expiring invitation; the inviter never receives a credential and gets
the same answer whether or not the email has an account; an account exists (and can sign in)
only once its owner redeemed; an existing account joins only when its owner accepts."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from jobyard.api.delivery import InvitationMessage, load_delivery, log_delivery
from jobyard.core import invitations
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import OrgId, UserId
from tests.api.conftest import FIXTURE_PASSWORD, Tenant
from tests.api.test_isolation import assert_envelope

API = "/api/v1"
OWN_PASSWORD = "my-own-long-password-42"
SENT: list[InvitationMessage] = []


async def collect(message: InvitationMessage) -> None:
    """A delivery for tests (also importable as JOBYARD_INVITATION_DELIVERY)."""
    SENT.append(message)


@pytest.fixture
def outbox(app: FastAPI) -> list[InvitationMessage]:
    SENT.clear()
    app.state.deliver = collect
    return SENT


def token_of(message: InvitationMessage) -> str:
    return message.link.split("token=", 1)[1]


async def invite(
    client: httpx.AsyncClient, tenant: Tenant, email: str, role: str = "member"
) -> httpx.Response:
    return await client.post(
        f"{API}/orgs/{tenant.org_id}/invitations",
        headers=tenant.headers(Role.ADMIN),
        json={"email": email, "role": role},
    )


async def login(client: httpx.AsyncClient, email: str, password: str) -> httpx.Response:
    return await client.post(f"{API}/auth/login", json={"email": email, "password": password})


async def member_emails(client: httpx.AsyncClient, tenant: Tenant) -> set[str]:
    r = await client.get(f"{API}/orgs/{tenant.org_id}/members", headers=tenant.headers())
    return {m["email"] for m in r.json()["items"]}


async def test_the_inviter_gets_no_credential_and_the_same_answer_for_any_email(
    client: httpx.AsyncClient,
    tenant_a: Tenant,
    tenant_b: Tenant,
    outbox: list[InvitationMessage],
) -> None:
    existing = await invite(client, tenant_a, tenant_b.users[Role.VIEWER].email)
    unknown = await invite(client, tenant_a, "nobody-yet@example.test")
    assert (existing.status_code, unknown.status_code) == (201, 201)

    def shape(body: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in body.items() if k not in ("id", "email") and not k.endswith("_at")}

    assert set(existing.json()) == set(unknown.json())
    assert shape(existing.json()) == shape(unknown.json())
    assert existing.headers.keys() - {
        "x-request-id",
        "content-length",
    } == unknown.headers.keys() - {
        "x-request-id",
        "content-length",
    }
    for response in (existing, unknown):
        body = response.json()
        assert not {"temporary_password", "token", "user_id", "display_name", "link"} & set(body)
    # The link went to the invitee only, through the delivery seam.
    assert [m.email for m in outbox] == [
        tenant_b.users[Role.VIEWER].email,
        "nobody-yet@example.test",
    ]
    for message, response in zip(outbox, (existing, unknown), strict=True):
        assert token_of(message).startswith("jyi_") and token_of(message) not in response.text
    # Nobody joined and no account was created by inviting.
    assert "nobody-yet@example.test" not in await member_emails(client, tenant_a)
    assert tenant_b.users[Role.VIEWER].email not in await member_emails(client, tenant_a)


async def test_an_unredeemed_invitation_has_no_account_that_could_sign_in(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, outbox: list[InvitationMessage]
) -> None:
    assert (await invite(client, tenant_a, "later@example.test")).status_code == 201
    cur = await conn.execute("SELECT count(*) AS n FROM users WHERE email = 'later@example.test'")
    assert (await cur.fetchone() or {})["n"] == 0
    assert_envelope(
        await login(client, "later@example.test", "anything-at-all"), 401, "unauthenticated"
    )


async def test_redeeming_creates_the_account_with_the_invitees_own_password(
    client: httpx.AsyncClient, tenant_a: Tenant, outbox: list[InvitationMessage]
) -> None:
    await invite(client, tenant_a, "New.Person@Example.test", role="viewer")
    token = token_of(outbox[-1])
    redeemed = await client.post(
        f"{API}/invitations/redeem",
        json={"token": token, "password": OWN_PASSWORD, "display_name": "New Person"},
    )
    assert redeemed.status_code == 201, redeemed.text
    me = await client.get(
        f"{API}/auth/me", headers={"Authorization": f"Bearer {redeemed.json()['access_token']}"}
    )
    assert me.json()["email"] == "new.person@example.test"
    assert [(o["id"], o["role"]) for o in me.json()["orgs"]] == [(tenant_a.org_id, "viewer")]
    assert (await login(client, "new.person@example.test", OWN_PASSWORD)).status_code == 200
    # Single use.
    again = await client.post(
        f"{API}/invitations/redeem", json={"token": token, "password": "another-password-1"}
    )
    assert_envelope(again, 404, "not_found")
    assert (await login(client, "new.person@example.test", "another-password-1")).status_code == 401


async def test_an_existing_account_joins_only_when_its_owner_accepts(
    client: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant, outbox: list[InvitationMessage]
) -> None:
    invitee = tenant_b.users[Role.VIEWER]
    await invite(client, tenant_a, invitee.email, role="member")
    token = token_of(outbox[-1])
    assert invitee.email not in await member_emails(client, tenant_a)
    # The link cannot set the existing account's password.
    taken = await client.post(
        f"{API}/invitations/redeem", json={"token": token, "password": "hijacked-password-1"}
    )
    assert_envelope(taken, 409, "conflict")
    assert (await login(client, invitee.email, "hijacked-password-1")).status_code == 401
    # Another signed-in account cannot accept it.
    wrong = await client.post(
        f"{API}/invitations/accept", json={"token": token}, headers=tenant_b.headers(Role.OWNER)
    )
    assert_envelope(wrong, 403, "forbidden")
    assert invitee.email not in await member_emails(client, tenant_a)
    accepted = await client.post(
        f"{API}/invitations/accept", json={"token": token}, headers=invitee.headers
    )
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["id"] == tenant_a.org_id and accepted.json()["role"] == "member"
    assert invitee.email in await member_emails(client, tenant_a)
    assert (await login(client, invitee.email, FIXTURE_PASSWORD)).status_code == 200
    reuse = await client.post(
        f"{API}/invitations/accept", json={"token": token}, headers=invitee.headers
    )
    assert_envelope(reuse, 404, "not_found")


async def test_the_pre_hijacking_attack_of_the_issue_fails(
    client: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant, outbox: list[InvitationMessage]
) -> None:
    """An attacker's org invites a victim's email, hoping for a password; later a real org
    invites the same email. The attacker never holds anything that signs in as the victim."""
    attacker = tenant_b.headers(Role.OWNER)
    trap = await client.post(
        f"{API}/orgs/{tenant_b.org_id}/invitations",
        headers=attacker,
        json={"email": "victim@example.test"},
    )
    assert trap.status_code == 201
    assert "temporary_password" not in trap.json()
    revoked = await client.delete(
        f"{API}/orgs/{tenant_b.org_id}/invitations/{trap.json()['id']}", headers=attacker
    )
    assert revoked.status_code == 204
    await invite(client, tenant_a, "victim@example.test")
    attacker_link, real_link = (token_of(m) for m in outbox)
    dead = await client.post(
        f"{API}/invitations/redeem", json={"token": attacker_link, "password": "attacker-pass-1"}
    )
    assert_envelope(dead, 404, "not_found")
    ok = await client.post(
        f"{API}/invitations/redeem", json={"token": real_link, "password": OWN_PASSWORD}
    )
    assert ok.status_code == 201
    assert (await login(client, "victim@example.test", "attacker-pass-1")).status_code == 401
    assert "victim@example.test" not in await member_emails(client, tenant_b)


async def test_admins_list_resend_and_revoke_pending_invitations(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant, outbox: list[InvitationMessage]
) -> None:
    base = f"{API}/orgs/{tenant_a.org_id}/invitations"
    admin = tenant_a.headers(Role.ADMIN)
    first = (await invite(client, tenant_a, "one@example.test")).json()
    await invite(client, tenant_a, "two@example.test")
    # An expired one stays listed (flagged) until re-sent or revoked.
    await invitations.invite(
        conn,
        OrgId(tenant_a.org_id),
        email="old@example.test",
        role=Role.VIEWER,
        invited_by=UserId(tenant_a.users[Role.OWNER].id),
        now=datetime.now(UTC) - timedelta(days=8),
    )
    listed = (await client.get(base, headers=admin)).json()["items"]
    assert [(i["email"], i["expired"]) for i in listed] == [
        ("one@example.test", False),
        ("two@example.test", False),
        ("old@example.test", True),
    ]
    assert all("token" not in i for i in listed)
    # Re-send: a new link; the old one stops working.
    old_token = token_of(outbox[0])
    resent = await client.post(f"{base}/{first['id']}/resend", headers=admin)
    assert resent.status_code == 200 and resent.json()["id"] == first["id"]
    new_token = token_of(outbox[-1])
    assert new_token != old_token
    gone = await client.post(
        f"{API}/invitations/redeem", json={"token": old_token, "password": OWN_PASSWORD}
    )
    assert_envelope(gone, 404, "not_found")
    # Revoke: the link stops working and the invitation leaves the list.
    assert (await client.delete(f"{base}/{first['id']}", headers=admin)).status_code == 204
    revoked = await client.post(
        f"{API}/invitations/redeem", json={"token": new_token, "password": OWN_PASSWORD}
    )
    assert_envelope(revoked, 404, "not_found")
    assert_envelope(await client.delete(f"{base}/{first['id']}", headers=admin), 404, "not_found")
    listed = (await client.get(base, headers=admin)).json()["items"]
    assert [i["email"] for i in listed] == ["two@example.test", "old@example.test"]
    # Members (and viewers) cannot manage invitations.
    assert_envelope(await client.get(base, headers=tenant_a.headers(Role.MEMBER)), 403, "forbidden")
    # Inviting someone who already is a member is a conflict (the member list shows it anyway).
    member = tenant_a.users[Role.MEMBER].email
    assert_envelope(await invite(client, tenant_a, member), 409, "conflict")


async def test_an_expired_invitation_cannot_be_redeemed(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    issued = await invitations.invite(
        conn,
        OrgId(tenant_a.org_id),
        email="slow@example.test",
        role=Role.MEMBER,
        invited_by=UserId(tenant_a.users[Role.OWNER].id),
        now=datetime.now(UTC) - timedelta(seconds=invitations.INVITATION_TTL_S + 1),
    )
    late = await client.post(
        f"{API}/invitations/redeem", json={"token": issued.token, "password": OWN_PASSWORD}
    )
    assert_envelope(late, 404, "not_found")
    cur = await conn.execute("SELECT token_hash FROM invitations WHERE id = %s",
                             (issued.invitation["id"],))  # fmt: skip
    row = await cur.fetchone()
    assert row is not None and bytes(row["token_hash"]) == invitations.hash_token(issued.token)
    assert issued.token.encode() not in bytes(row["token_hash"])  # only its SHA-256 is kept


async def test_the_default_delivery_writes_the_link_in_one_log_line(
    client: httpx.AsyncClient, app: FastAPI, tenant_a: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    assert app.state.deliver is log_delivery
    with caplog.at_level(logging.WARNING, logger="jobyard.api.invitations"):
        assert (await invite(client, tenant_a, "demo-invitee@example.test")).status_code == 201
    lines = [r.msg for r in caplog.records if "invitation link" in str(r.msg)]
    assert len(lines) == 1
    line = lines[0]
    assert isinstance(line, dict) and line["to"] == "demo-invitee@example.test"
    assert line["link"].startswith("http://127.0.0.1:8000/invite?token=jyi_")


def test_a_deployment_replaces_the_delivery_by_import_path(api_settings: Any) -> None:
    settings = api_settings.model_copy(
        update={"invitation_delivery": "tests.api.test_invitations:collect"}
    )
    assert load_delivery(settings) is collect


async def test_admins_cannot_resend_or_revoke_an_owners_invitation(
    client: httpx.AsyncClient, tenant_a: Tenant, outbox: list[InvitationMessage]
) -> None:
    base = f"{API}/orgs/{tenant_a.org_id}/invitations"
    made = await client.post(
        base, headers=tenant_a.headers(Role.OWNER), json={"email": "co-owner@example.test",
                                                          "role": "owner"}
    )  # fmt: skip
    assert made.status_code == 201
    admin = tenant_a.headers(Role.ADMIN)
    assert_envelope(await client.post(f"{base}/{made.json()['id']}/resend", headers=admin), 403,
                    "forbidden")  # fmt: skip
    assert_envelope(await client.delete(f"{base}/{made.json()['id']}", headers=admin), 403,
                    "forbidden")  # fmt: skip
    # Refused before anything changed: the link sent first still works.
    (message,) = outbox
    redeemed = await client.post(
        f"{API}/invitations/redeem", json={"token": token_of(message), "password": OWN_PASSWORD}
    )
    assert redeemed.status_code == 201
