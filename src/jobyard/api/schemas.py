"""Request and response shapes of the auth, org, member, project and API-key resources."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from jobyard.domain import limits
from jobyard.domain.accounts import Email, NewPassword, Password
from jobyard.domain.enums import Role


def _not_bool(value: object) -> object:
    """JSON true is not the number 1 (lax validation would read it so)."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


ExpiryDays = Annotated[int, Field(ge=1, le=3650), BeforeValidator(_not_bool)]
Slug = Annotated[str, Field(pattern=limits.SLUG_PATTERN, examples=["acme"])]
# No control characters (PostgreSQL text cannot hold NUL; the rest has no place in a name).
_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
Name = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200, pattern=_PRINTABLE)
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ----------------------------------------------------------------------------- auth


class LoginRequest(_In):
    email: Email
    password: Password


class RefreshRequest(_In):
    refresh_token: Annotated[str, Field(min_length=1, max_length=4096)]


class PasswordChange(_In):
    current_password: Password
    new_password: NewPassword


class TokenPair(BaseModel):
    access_token: str
    token_type: Literal["bearer"] = "bearer"  # noqa: S105 - the OAuth token type, not a secret
    expires_in: int = Field(description="Seconds until the access token expires.")
    refresh_token: str
    refresh_expires_at: datetime


class MyOrg(BaseModel):
    id: int
    name: str
    slug: str
    role: Role


class Me(BaseModel):
    id: int
    email: str
    display_name: str
    orgs: list[MyOrg]


# ----------------------------------------------------------------------------- orgs


class OrgCreate(_In):
    name: Name
    slug: Slug


class OrgUpdate(_In):
    name: Name


class OrgPublic(BaseModel):
    id: int
    name: str
    slug: str
    created_at: datetime
    role: Role | None = Field(default=None, description="Your role in it.")


# ----------------------------------------------------------------------------- members


class MemberUpdate(_In):
    role: Role


class MemberPublic(BaseModel):
    user_id: int
    email: str
    display_name: str
    role: Role
    created_at: datetime


# ----------------------------------------------------------------------------- invitations

InvitationToken = Annotated[str, Field(min_length=1, max_length=200)]


class InvitationCreate(_In):
    email: Email
    role: Role = Role.MEMBER


class InvitationPublic(BaseModel):
    """An invitation as its organization's admins see it: never its token."""

    id: int
    email: str
    role: Role
    invited_by: int | None
    created_at: datetime
    sent_at: datetime = Field(description="When the current link was sent (re-sending renews it).")
    expires_at: datetime
    expired: bool = False


class InvitationRedeem(_In):
    token: InvitationToken
    password: NewPassword
    display_name: Annotated[
        str, StringConstraints(strip_whitespace=True, max_length=200, pattern=_PRINTABLE)
    ] = ""


class InvitationAccept(_In):
    token: InvitationToken


# ----------------------------------------------------------------------------- projects


class ProjectCreate(_In):
    name: Name
    slug: Slug


class ProjectPublic(BaseModel):
    id: int
    org_id: int
    name: str
    slug: str
    created_at: datetime


# ----------------------------------------------------------------------------- API keys

KeyRole = Literal["admin", "member", "viewer"]


class ApiKeyCreate(_In):
    name: Name
    role: KeyRole = "member"
    expires_in_days: ExpiryDays | None = None


class ApiKeyPublic(BaseModel):
    id: int
    project_id: int
    name: str
    prefix: str = Field(description="The key's first characters, to recognise it.")
    role: Role
    created_by: int | None
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None


class ApiKeyCreated(ApiKeyPublic):
    key: str = Field(description="The secret. Shown only in this response; store it now.")
