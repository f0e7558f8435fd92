"""Authentication state in the database: passwords, refresh-token families, API keys, and the
membership look-ups the API's access guard makes.

Refresh tokens are opaque (`jyr_` + 256 bits) and stored as SHA-256. Each login starts a family;
every refresh marks the presented token rotated and issues its successor in the same family.
Presenting a rotated token again is treated as theft and revokes the whole family — except for
a short grace window after the rotation, where it returns *the same* successor again. The
successor is derived from its parent with a server-side HMAC key, so the server can re-issue it
without storing it: a client whose refresh response was lost (or two tabs refreshing at once)
is not logged out, and a thief replaying within the window only obtains a token the legitimate
client also holds — whichever of them rotates it next makes the other's use a detected replay.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from jobyard.db import run
from jobyard.db.errors import translated
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.errors import JobyardError, NotFound
from jobyard.domain.ids import OrgId, ProjectId, UserId
from jobyard.domain.passwords import hash_password, needs_rehash, verify_password
from jobyard.logs import get_logger

log = get_logger("jobyard.auth")

REFRESH_PREFIX: Final = "jyr_"
API_KEY_PREFIX: Final = "jy_"
REFRESH_TTL_S: Final = 7 * 86400
# A retried refresh within this many seconds of the rotation gets the same successor back.
REFRESH_GRACE_S: Final = 10.0


class AuthenticationFailed(JobyardError):
    """Authentication required: the credentials are missing, invalid or expired."""

    code = "unauthenticated"


class PermissionDenied(JobyardError):
    """Your role does not allow this action."""

    code = "forbidden"


@dataclass(frozen=True)
class SigningKeys:
    """Independent keys derived from the one configured secret, so no key serves two purposes.

    `kid` names the access-token key: tokens signed under a previous secret fail the kid check.
    """

    access: bytes
    refresh_successor: bytes
    kid: str

    @classmethod
    def derive(cls, secret: str) -> SigningKeys:
        root = secret.encode()
        access = hmac.new(root, b"jobyard/access-token/v1", hashlib.sha256).digest()
        successor = hmac.new(root, b"jobyard/refresh-successor/v1", hashlib.sha256).digest()
        kid = hashlib.sha256(b"jobyard/kid/" + access).hexdigest()[:16]
        return cls(access=access, refresh_successor=successor, kid=kid)


@dataclass(frozen=True)
class SessionUser:
    id: UserId
    email: str
    display_name: str


@dataclass(frozen=True)
class IssuedRefresh:
    user_id: UserId
    family_id: uuid.UUID
    token: str
    expires_at: datetime


@dataclass(frozen=True)
class ApiKeyPrincipal:
    id: int
    project_id: ProjectId
    org_id: OrgId
    role: Role


@dataclass(frozen=True)
class Access:
    """What the guard found: the caller's role over an org (and project, for project routes)."""

    org_id: OrgId
    role: Role
    project_id: ProjectId | None = None


def token_hash(secret: str) -> bytes:
    """SHA-256 of a token or key: what the database stores and looks up."""
    return hashlib.sha256(secret.encode()).digest()


def new_refresh_token() -> str:
    return REFRESH_PREFIX + secrets.token_urlsafe(32)


def successor_of(keys: SigningKeys, parent: str) -> str:
    """The refresh token that rotating `parent` issues: deterministic under the server key, so a
    retried rotation can hand out the same token again without it ever being stored."""
    mac = hmac.new(keys.refresh_successor, parent.encode(), hashlib.sha256).digest()
    return REFRESH_PREFIX + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def new_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def api_key_display_prefix(secret: str) -> str:
    """The first characters a user sees in a key list to recognise a key (not enough to use it)."""
    return secret[: len(API_KEY_PREFIX) + 6]


# ----------------------------------------------------------------------------- passwords


async def authenticate_password(conn: Conn, email: str, password: str) -> SessionUser:
    """The user with this email and password. One message for every failure, and a miss costs
    as much as a hit (verify_password checks a dummy hash), so emails cannot be enumerated."""
    row = await run.one(conn, "auth_user_by_email", {"email": email.strip()})
    ok = verify_password(row["password_hash"] if row else None, password)
    if row is None or not ok or not row["is_active"]:
        raise AuthenticationFailed("invalid email or password")
    if needs_rehash(row["password_hash"]):
        await run.execute(
            conn,
            "auth_user_set_password",
            {"user_id": row["id"], "password_hash": hash_password(password)},
        )
    return SessionUser(UserId(row["id"]), row["email"], row["display_name"])


async def change_password(
    conn: Conn,
    user_id: UserId,
    current: str,
    new: str,
    *,
    keep_family_id: uuid.UUID,
    now: datetime | None = None,
) -> None:
    """Replace the password and end every other session of the user."""
    row = await run.one(conn, "auth_user_by_id", {"user_id": user_id})
    if row is None or not verify_password(row["password_hash"], current):
        # A well-formed request the caller may not make (403), not invalid input (422).
        raise PermissionDenied("the current password is wrong", field="current_password")
    async with conn.transaction():
        await run.execute(
            conn,
            "auth_user_set_password",
            {"user_id": user_id, "password_hash": hash_password(new)},
        )
        await run.execute(
            conn,
            "auth_refresh_revoke_other_families",
            {"user_id": user_id, "keep_family_id": keep_family_id, "now": now},
        )


# ----------------------------------------------------------------------------- sessions


async def start_session(
    conn: Conn, user_id: UserId, *, now: datetime | None = None
) -> IssuedRefresh:
    """A new refresh-token family for a fresh login."""
    token = new_refresh_token()
    row = await run.one(
        conn,
        "auth_refresh_insert",
        {
            "user_id": user_id,
            "family_id": uuid.uuid4(),
            "token_hash": token_hash(token),
            "ttl_s": REFRESH_TTL_S,
            "now": now,
        },
    )
    assert row is not None
    return IssuedRefresh(user_id, row["family_id"], token, row["expires_at"])


async def rotate_refresh(
    conn: Conn,
    keys: SigningKeys,
    presented: str,
    *,
    now: datetime | None = None,
    grace_s: float = REFRESH_GRACE_S,
) -> IssuedRefresh:
    """Exchange a refresh token for its successor (see the module docstring for the rules)."""
    if not presented.startswith(REFRESH_PREFIX):
        raise AuthenticationFailed("invalid refresh token")
    successor = successor_of(keys, presented)
    reused_family: uuid.UUID | None = None
    issued: IssuedRefresh | None = None
    async with conn.transaction():
        row = await run.one(
            conn, "auth_refresh_lock", {"token_hash": token_hash(presented), "now": now}
        )
        if row is None or row["revoked_at"] is not None or row["expired"] or not row["is_active"]:
            raise AuthenticationFailed("invalid refresh token")
        family_id: uuid.UUID = row["family_id"]
        user_id = UserId(row["user_id"])
        if row["rotated_at"] is None:
            await run.execute(conn, "auth_refresh_mark_rotated", {"id": row["id"], "now": now})
            new = await run.one(
                conn,
                "auth_refresh_insert",
                {
                    "user_id": user_id,
                    "family_id": family_id,
                    "token_hash": token_hash(successor),
                    "ttl_s": REFRESH_TTL_S,
                    "now": now,
                },
            )
            assert new is not None
            issued = IssuedRefresh(user_id, family_id, successor, new["expires_at"])
        else:
            live = None
            if row["since_rotation_s"] <= grace_s:
                live = await run.one(
                    conn,
                    "auth_refresh_live_successor",
                    {"token_hash": token_hash(successor), "family_id": family_id, "now": now},
                )
            if live is not None:
                issued = IssuedRefresh(user_id, family_id, successor, live["expires_at"])
            else:
                await run.execute(
                    conn, "auth_refresh_revoke_family", {"family_id": family_id, "now": now}
                )
                reused_family = family_id
    # Raised after the commit: the family's revocation must survive the error response.
    if reused_family is not None:
        log.warning("refresh token replay: family revoked", family_id=str(reused_family))
        raise AuthenticationFailed(
            "this refresh token was already used; every session of this login was ended",
            reason="refresh_token_reused",
        )
    assert issued is not None
    return issued


async def revoke_family(conn: Conn, family_id: uuid.UUID, *, now: datetime | None = None) -> int:
    return await run.execute(
        conn, "auth_refresh_revoke_family", {"family_id": family_id, "now": now}
    )


async def session_user(conn: Conn, user_id: UserId, family_id: uuid.UUID) -> SessionUser | None:
    """The active user behind an access token whose family is still unrevoked, else None."""
    row = await run.one(conn, "auth_session_user", {"user_id": user_id, "family_id": family_id})
    if row is None:
        return None
    return SessionUser(UserId(row["id"]), row["email"], row["display_name"])


# ----------------------------------------------------------------------------- API keys


async def authenticate_api_key(
    conn: Conn, secret: str, *, now: datetime | None = None
) -> ApiKeyPrincipal | None:
    if not secret.startswith(API_KEY_PREFIX):
        return None
    row = await run.one(
        conn, "auth_api_key_authenticate", {"key_hash": token_hash(secret), "now": now}
    )
    if row is None:
        return None
    return ApiKeyPrincipal(
        id=row["id"],
        project_id=ProjectId(row["project_id"]),
        org_id=OrgId(row["org_id"]),
        role=Role(row["role"]),
    )


async def create_api_key(
    conn: Conn,
    project_id: ProjectId,
    *,
    name: str,
    role: Role,
    created_by: UserId | None,
    expires_at: datetime | None = None,
) -> tuple[str, dict[str, Any]]:
    """A new key: (the secret, to show once; the stored row, which holds only its hash)."""
    secret = new_api_key()
    async with translated():
        row = await run.one(
            conn,
            "auth_api_key_insert",
            {
                "project_id": project_id,
                "name": name,
                "prefix": api_key_display_prefix(secret),
                "key_hash": token_hash(secret),
                "role": role,
                "created_by": created_by,
                "expires_at": expires_at,
            },
        )
    assert row is not None
    return secret, row


async def api_key_page(
    conn: Conn, project_id: ProjectId, *, after_id: int, limit: int
) -> list[dict[str, Any]]:
    return await run.all_rows(
        conn,
        "auth_api_key_page",
        {"project_id": project_id, "after_id": after_id, "limit": limit},
    )


async def revoke_api_key(
    conn: Conn, project_id: ProjectId, key_id: int, *, now: datetime | None = None
) -> dict[str, Any]:
    row = await run.one(
        conn, "auth_api_key_revoke", {"id": key_id, "project_id": project_id, "now": now}
    )
    if row is None:
        raise NotFound("API key not found")
    return row


# ----------------------------------------------------------------------------- the guard's look-ups


async def user_project_access(conn: Conn, user_id: UserId, project_id: int) -> Access | None:
    """The user's role over a project through its organization; None if not theirs or absent."""
    row = await run.one(conn, "auth_access_project", {"user_id": user_id, "project_id": project_id})
    if row is None:
        return None
    return Access(OrgId(row["org_id"]), Role(row["role"]), ProjectId(row["project_id"]))


async def user_org_access(conn: Conn, user_id: UserId, org_id: int) -> Access | None:
    row = await run.one(conn, "auth_access_org", {"user_id": user_id, "org_id": org_id})
    if row is None:
        return None
    return Access(OrgId(row["org_id"]), Role(row["role"]))
