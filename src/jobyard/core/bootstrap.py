"""The first owner of an organization, made from the command line.

On your own database the dashboard and API need an account, and the only way in is an
invitation from an owner: someone has to be first. `jobyard accounts create-owner` makes that
account, with the password its user types, as the owner of the organization (found by slug, as
the SDK and workers create it, or created). Only while the organization has no owner: after
that, owners invite (docs/SECURITY.md, "Invitations").
"""

from __future__ import annotations

from pydantic import TypeAdapter, ValidationError

from jobyard.core.projects import check_slug
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.accounts import Email, NewPassword
from jobyard.domain.enums import Role
from jobyard.domain.errors import Conflict, ValidationFailed
from jobyard.domain.ids import UserId
from jobyard.domain.passwords import hash_password

_EMAIL: TypeAdapter[str] = TypeAdapter(Email)
_PASSWORD: TypeAdapter[str] = TypeAdapter(NewPassword)


def checked_email(email: str) -> str:
    try:
        return _EMAIL.validate_python(email)
    except ValidationError:
        raise ValidationFailed(f"{email!r} is not an email address", field="email") from None


def check_password(password: str) -> None:
    try:
        _PASSWORD.validate_python(password)
    except ValidationError:
        raise ValidationFailed(
            "the password needs 12 to 1,024 characters", field="password"
        ) from None


async def create_owner(
    conn: Conn, *, email: str, password: str, display_name: str, org_slug: str
) -> tuple[UserId, int]:
    """A new account as the first owner of the organization `org_slug`; (user id, org id).
    Conflict if the organization has an owner or the email an account."""
    check_slug("organization", org_slug)
    address = checked_email(email)
    check_password(password)
    password_hash = hash_password(password)  # slow: before the organization's lock is taken
    async with conn.transaction():
        org = await run.one(conn, "project_ensure_org", {"slug": org_slug})
        assert org is not None
        org_id = int(org["id"])
        # Locked, as every membership change does: two first owners at once are one too many.
        await run.one(conn, "tenancy_org_lock", {"org_id": org_id})
        owners = await run.one(conn, "tenancy_owner_count", {"org_id": org_id})
        if owners is not None and owners["owners"] > 0:
            raise Conflict(
                f"organization {org_slug!r} already has an owner: ask them for an invitation "
                f"(dashboard: Members; API: POST /api/v1/orgs/{org_id}/invitations)",
                field="org",
            )
        user = await run.one(
            conn,
            "invitation_user_insert",
            {"email": address, "password_hash": password_hash, "display_name": display_name},
        )
        if user is None:
            raise Conflict(
                "an account with this email exists already; use another email, or have an "
                "owner invite it",
                field="email",
            )
        user_id = UserId(int(user["id"]))
        await run.one(
            conn,
            "tenancy_member_insert",
            {"org_id": org_id, "user_id": user_id, "role": Role.OWNER},
        )
    return user_id, org_id
