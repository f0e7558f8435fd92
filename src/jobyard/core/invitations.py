"""Invitations: the only way into an organization besides creating it (issue 12).

The inviter never receives a credential and learns nothing about the email: the answer to an
invitation is the same whether or not the email has an account. The token (`jyi_` + 256 random
bits) is stored only as SHA-256 and goes to the invitee alone, through the delivery seam
(`jobyard.api.invitations.Deliver`). Redeeming it proves control of the email:

- no account with that email yet: the invitee sets their own password and the account is
  created then — so an account nobody has redeemed does not exist and cannot sign in;
- an account exists: its owner accepts while signed in (the token's email must be theirs), and
  only then does the membership start.

Tokens are single use (`accepted_at`), expire (`INVITATION_TTL_S`), and are replaced by a
re-send or killed by a revoke. The invitation row is locked while it is redeemed, so two
redemptions of one token cannot both succeed.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from jobyard.core.auth import PermissionDenied
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.errors import Conflict, NotFound
from jobyard.domain.ids import OrgId, UserId
from jobyard.domain.passwords import hash_password

Row = dict[str, Any]

TOKEN_PREFIX: Final = "jyi_"  # noqa: S105 - a prefix, not a secret
INVITATION_TTL_S: Final = 7 * 86400


class WrongAccount(PermissionDenied):
    """This invitation was sent to another email address than the account you are signed in with."""

    code = "forbidden"


@dataclass(frozen=True)
class IssuedInvitation:
    """An invitation just created or re-sent, with its token (deliver it; it is not stored)."""

    invitation: Row
    token: str


def _new_token() -> tuple[str, bytes]:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


async def invite(
    conn: Conn,
    org_id: OrgId,
    *,
    email: str,
    role: Role,
    invited_by: UserId,
    now: datetime | None = None,
) -> IssuedInvitation:
    """Invite `email` with `role`; an open invitation of the same email is re-sent instead.

    Conflict only when the email already belongs to this organization (which the inviter can
    read in its member list anyway); nothing depends on whether an account exists.
    """
    async with conn.transaction():
        if await run.one(conn, "invitation_member_exists", {"org_id": org_id, "email": email}):
            # No role word (owner, admin, member, viewer): the role sent would be withheld from it.
            raise Conflict(
                "someone with this email already belongs to this organization", field="email"
            )
        token, digest = _new_token()
        row = await run.one(
            conn,
            "invitation_upsert",
            {
                "org_id": org_id,
                "email": email,
                "role": role,
                "token_hash": digest,
                "invited_by": invited_by,
                "now": now,
                "ttl_s": INVITATION_TTL_S,
            },
        )
    assert row is not None
    return IssuedInvitation(row, token)


async def get(conn: Conn, org_id: OrgId, invitation_id: int) -> Row:
    """One open invitation of the organization (NotFound otherwise)."""
    row = await run.one(conn, "invitation_get", {"org_id": org_id, "invitation_id": invitation_id})
    if row is None:
        raise NotFound("invitation not found")
    return row


async def resend(
    conn: Conn, org_id: OrgId, invitation_id: int, *, now: datetime | None = None
) -> IssuedInvitation:
    """A new token and expiry for an open invitation; the previous token stops working."""
    token, digest = _new_token()
    row = await run.one(
        conn,
        "invitation_resend",
        {
            "org_id": org_id,
            "invitation_id": invitation_id,
            "token_hash": digest,
            "now": now,
            "ttl_s": INVITATION_TTL_S,
        },
    )
    if row is None:
        raise NotFound("invitation not found")
    return IssuedInvitation(row, token)


async def revoke(
    conn: Conn, org_id: OrgId, invitation_id: int, *, now: datetime | None = None
) -> None:
    params = {"org_id": org_id, "invitation_id": invitation_id, "now": now}
    if await run.execute(conn, "invitation_revoke", params) == 0:
        raise NotFound("invitation not found")


async def page(
    conn: Conn, org_id: OrgId, *, after_id: int, limit: int, now: datetime | None = None
) -> list[Row]:
    """Open invitations of an organization (pending or expired), oldest first."""
    return await run.all_rows(
        conn,
        "invitation_page",
        {"org_id": org_id, "after_id": after_id, "limit": limit, "now": now},
    )


_INVALID: Final = "this invitation link is invalid, used, revoked or expired; ask for a new one"


async def lookup(conn: Conn, token: str, *, now: datetime | None = None) -> Row:
    """The open invitation a token names (org name, email, role, whether an account exists)."""
    row = await run.one(conn, "invitation_by_token", {"token_hash": hash_token(token), "now": now})
    if row is None:
        raise NotFound(_INVALID)
    return row


async def redeem_new_account(
    conn: Conn,
    token: str,
    *,
    password: str,
    display_name: str,
    now: datetime | None = None,
) -> tuple[UserId, Row]:
    """Create the invited account with the invitee's own password and start its membership."""
    password_hash = hash_password(password)  # slow: before the row lock is taken
    async with conn.transaction():
        invitation = await lookup(conn, token, now=now)
        user_id = await create_account(
            conn,
            email=invitation["email"],
            password_hash=password_hash,
            display_name=display_name,
        )
        if user_id is None:
            raise Conflict(
                "an account with this email exists: sign in to it and accept the invitation",
                field="token",
            )
        await _join(conn, invitation, user_id, now)
    return user_id, invitation


async def accept(
    conn: Conn, token: str, *, user_id: UserId, email: str, now: datetime | None = None
) -> Row:
    """The signed-in account `user_id` (with `email`) accepts: its membership starts now."""
    async with conn.transaction():
        invitation = await lookup(conn, token, now=now)
        if invitation["email"] != email.lower():
            raise WrongAccount()
        await _join(conn, invitation, user_id, now)
    return invitation


async def _join(conn: Conn, invitation: Row, user_id: UserId, now: datetime | None) -> None:
    await run.execute(
        conn,
        "invitation_member_insert",
        {"org_id": invitation["org_id"], "user_id": user_id, "role": invitation["role"]},
    )
    await run.execute(
        conn,
        "invitation_mark_accepted",
        {"invitation_id": invitation["id"], "user_id": user_id, "now": now},
    )


async def create_account(
    conn: Conn, *, email: str, password_hash: str, display_name: str
) -> UserId | None:
    """A new account with the password its owner chose; None if the email has one."""
    user = await run.one(
        conn,
        "invitation_user_insert",
        {"email": email, "password_hash": password_hash, "display_name": display_name},
    )
    return UserId(int(user["id"])) if user is not None else None
