"""API test fixtures: the real app over ASGI, on this test's own database, with two tenants.

- `client`: an httpx.AsyncClient talking to `create_app()` through ASGITransport
  (base_url http://testserver; paths start with /api/v1).
- `tenant_a`, `tenant_b`: two organizations, each with one project, one user per role
  (owner/admin/member/viewer, each with a fresh access + refresh token) and one API key per
  key role (admin/member/viewer). `tenant.headers(Role.ADMIN)` / `tenant.key_headers(Role.MEMBER)`
  give request headers; `tenant.markers` are strings that must never appear in a response to the
  other tenant.
- `app`, `api_pool`, `api_settings`, `signing_keys` for lower-level needs; `conn` (tests/conftest)
  is an autocommit connection to the same database.

Tokens are minted directly (no HTTP login) so fixtures never consume the login rate limit.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from jobyard.api.app import create_app
from jobyard.api.auth import issue_access_token
from jobyard.core import auth as core_auth
from jobyard.core.auth import SigningKeys
from jobyard.db.pool import Conn, Pool, open_pool
from jobyard.domain.enums import Role
from jobyard.domain.ids import ProjectId, UserId
from jobyard.domain.passwords import hash_password
from jobyard.domain.settings import Settings

TEST_SECRET = "jobyard-test-secret-0123456789abcdef-0123456789"
FIXTURE_PASSWORD = "fixture-password-123"
KEY_ROLES = (Role.ADMIN, Role.MEMBER, Role.VIEWER)
_HASH: str | None = None
_seq = itertools.count(1)


def fixture_password_hash() -> str:
    """argon2id is slow on purpose; hash the shared fixture password once per process."""
    global _HASH
    if _HASH is None:
        _HASH = hash_password(FIXTURE_PASSWORD)
    return _HASH


@dataclass
class TestUser:
    id: int
    email: str
    role: Role
    access_token: str
    refresh_token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.access_token}"}


@dataclass
class Tenant:
    label: str
    org_id: int
    org_name: str
    org_slug: str
    project_id: int
    project_name: str
    project_slug: str
    users: dict[Role, TestUser] = field(default_factory=dict)
    api_keys: dict[Role, str] = field(default_factory=dict)

    def headers(self, role: Role = Role.OWNER) -> dict[str, str]:
        return self.users[role].headers

    def key_headers(self, role: Role = Role.ADMIN) -> dict[str, str]:
        return {"X-API-Key": self.api_keys[role]}

    @property
    def markers(self) -> tuple[str, ...]:
        """Strings identifying this tenant: none may leak to another tenant."""
        return (
            self.org_name,
            self.org_slug,
            self.project_name,
            self.project_slug,
            *(u.email for u in self.users.values()),
        )


@pytest.fixture
def api_settings(db_url: str) -> Settings:
    return Settings(env="test", database_url=db_url, secret_key=SecretStr(TEST_SECRET))


@pytest.fixture
def signing_keys(api_settings: Settings) -> SigningKeys:
    return SigningKeys.derive(api_settings.secret_key.get_secret_value())


@pytest.fixture
async def api_pool(db_url: str) -> AsyncIterator[Pool]:
    pool = await open_pool(db_url, min_size=1, max_size=4, name="jobyard-api-test")
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def app(api_settings: Settings, api_pool: Pool) -> FastAPI:
    return create_app(api_settings, pool=api_pool)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


async def _one(conn: Conn, query: str, params: dict[str, Any]) -> dict[str, Any]:
    cur = await conn.execute(query, params)  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return row


async def make_user(
    conn: Conn, keys: SigningKeys, *, email: str | None = None, role: Role = Role.OWNER
) -> TestUser:
    """A user with the fixture password and a live session (access + refresh token)."""
    n = next(_seq)
    row = await _one(
        conn,
        "INSERT INTO users (email, password_hash, display_name) VALUES (%(e)s, %(h)s, %(d)s)"
        " RETURNING id, email",
        {"e": email or f"user{n}@example.test", "h": fixture_password_hash(), "d": f"User {n}"},
    )
    refresh = await core_auth.start_session(conn, UserId(row["id"]))
    access, _ = issue_access_token(keys, UserId(row["id"]), refresh.family_id)
    return TestUser(row["id"], row["email"], role, access, refresh.token)


async def make_tenant(conn: Conn, keys: SigningKeys, label: str) -> Tenant:
    n = next(_seq)
    org = await _one(
        conn,
        "INSERT INTO organizations (name, slug) VALUES (%(n)s, %(s)s) RETURNING id, name, slug",
        {"n": f"Org {label.upper()} {n}", "s": f"org-{label}-{n}"},
    )
    project = await _one(
        conn,
        "INSERT INTO projects (org_id, name, slug) VALUES (%(o)s, %(n)s, %(s)s)"
        " RETURNING id, name, slug",
        {"o": org["id"], "n": f"Project {label.upper()} {n}", "s": f"project-{label}-{n}"},
    )
    tenant = Tenant(
        label, org["id"], org["name"], org["slug"], project["id"], project["name"], project["slug"]
    )
    for role in Role:
        user = await make_user(conn, keys, email=f"{role}-{label}-{n}@example.test", role=role)
        await conn.execute(
            "INSERT INTO organization_members (org_id, user_id, role) VALUES (%s, %s, %s)",
            (org["id"], user.id, role.value),
        )
        tenant.users[role] = user
    for role in KEY_ROLES:
        secret, _ = await core_auth.create_api_key(
            conn,
            ProjectId(project["id"]),
            name=f"{role} key",
            role=role,
            created_by=UserId(tenant.users[Role.OWNER].id),
        )
        tenant.api_keys[role] = secret
    return tenant


@pytest.fixture
async def tenant_a(conn: Conn, signing_keys: SigningKeys) -> Tenant:
    return await make_tenant(conn, signing_keys, "a")


@pytest.fixture
async def tenant_b(conn: Conn, signing_keys: SigningKeys) -> Tenant:
    return await make_tenant(conn, signing_keys, "b")
