"""The first owner of an organization, made from the command line.

On your own database the dashboard and API need an account, and the only way in is an
invitation from an owner: someone has to be first. `jobyard accounts create-owner` makes that
account, with the password its user types, as the owner of the organization (found by slug, as
the SDK and workers create it, or created). Only while the organization has no owner: after
that, owners invite (docs/SECURITY.md, "Invitations").
"""

from __future__ import annotations

from pydantic import TypeAdapter, ValidationError

from jobyard.core import invitations, projects, tenancy
from jobyard.core.projects import check_slug
from jobyard.db.pool import Conn
from jobyard.domain.accounts import Email, NewPassword
from jobyard.domain.errors import Conflict, ValidationFailed
from jobyard.domain.ids import OrgId, UserId
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
        org_id = await projects.ensure_org(conn, org_slug)
        user_id = await invitations.create_account(
            conn, email=address, password_hash=password_hash, display_name=display_name
        )
        if user_id is None:
            raise Conflict(
                "an account with this email exists already; use another email, or have an "
                "owner invite it",
                field="email",
            )
        await tenancy.add_first_owner(conn, OrgId(org_id), user_id, org_slug=org_slug)
    return user_id, org_id
