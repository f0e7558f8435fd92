"""A valid call for every route in the table: the generated tests need real path params and a
valid body, so that validation can never mask (or fake) the guard's answer.

Add one entry per route, keyed by (method, path) exactly as in its `Route`. The function gets a
`FixtureContext` for the tenant whose resources it should create (via `ctx.conn`, an autocommit
connection to the test database) and returns a `Call`. The generated tests then:

- call it as the owner/admin/… of ANOTHER tenant → must be 404 and leak none of `markers`;
- call it with the caller's own tenant id but this call's other ids → 404 (handlers must scope
  every lookup by the guarded tenant);
- call it with each role below `min_role` → 403;
- call it at exactly `min_role` → must answer `ok_status` (default: the route's status_code).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from jobyard.core import auth as core_auth
from jobyard.core.auth import SigningKeys
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.ids import ProjectId
from tests.api.conftest import FIXTURE_PASSWORD, Tenant, make_user

_seq = itertools.count(1)


@dataclass(frozen=True)
class Call:
    path_params: dict[str, int | str]
    json: Any = None  # request body; None sends none
    params: dict[str, Any] = field(default_factory=dict)  # query string
    ok_status: int | None = None  # expected at min_role; None: the Route's status_code
    markers: tuple[str, ...] = ()  # values of the created resources that must not leak


@dataclass(frozen=True)
class FixtureContext:
    conn: Conn
    tenant: Tenant
    keys: SigningKeys

    @property
    def project(self) -> dict[str, int | str]:
        return {"project_id": self.tenant.project_id}

    @property
    def org(self) -> dict[str, int | str]:
        return {"org_id": self.tenant.org_id}


RouteFixture = Callable[[FixtureContext], Awaitable[Call]]


async def _scalar(conn: Conn, query: str, *args: Any) -> Any:
    cur = await conn.execute(query, args)  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return next(iter(row.values()))


# ----------------------------------------------------------------------------- auth


async def _login(ctx: FixtureContext) -> Call:
    return Call({}, {"email": ctx.tenant.users[Role.VIEWER].email, "password": FIXTURE_PASSWORD})


async def _refresh(ctx: FixtureContext) -> Call:
    return Call({}, {"refresh_token": ctx.tenant.users[Role.VIEWER].refresh_token})


async def _password(ctx: FixtureContext) -> Call:
    return Call(
        {}, {"current_password": FIXTURE_PASSWORD, "new_password": "another-long-password-1"}
    )


async def _none(ctx: FixtureContext) -> Call:
    return Call({})


# ----------------------------------------------------------------------------- orgs


async def _new_org(ctx: FixtureContext) -> Call:
    n = next(_seq)
    return Call({}, {"name": f"New org {n}", "slug": f"new-org-{n}"})


async def _org(ctx: FixtureContext) -> Call:
    return Call(ctx.org)


async def _org_rename(ctx: FixtureContext) -> Call:
    return Call(ctx.org, {"name": "Renamed org"})


# ----------------------------------------------------------------------------- members


async def _new_member(ctx: FixtureContext) -> Call:
    n = next(_seq)
    return Call(ctx.org, {"email": f"invitee-{n}@example.test", "role": "member"})


async def _member(ctx: FixtureContext) -> Call:
    user = await make_user(ctx.conn, ctx.keys, email=f"target-{next(_seq)}@example.test")
    await ctx.conn.execute(
        "INSERT INTO organization_members (org_id, user_id, role) VALUES (%s, %s, 'member')",
        (ctx.tenant.org_id, user.id),
    )
    return Call({**ctx.org, "user_id": user.id}, markers=(user.email,))


async def _member_update(ctx: FixtureContext) -> Call:
    call = await _member(ctx)
    return Call(call.path_params, {"role": "viewer"}, markers=call.markers)


# ----------------------------------------------------------------------------- projects


async def _new_project(ctx: FixtureContext) -> Call:
    n = next(_seq)
    return Call(ctx.org, {"name": f"New project {n}", "slug": f"new-project-{n}"})


async def _project(ctx: FixtureContext) -> Call:
    return Call(ctx.project)


# ----------------------------------------------------------------------------- API keys


async def _new_key(ctx: FixtureContext) -> Call:
    return Call(ctx.project, {"name": "ci key", "role": "viewer"})


async def _key(ctx: FixtureContext) -> Call:
    _, row = await core_auth.create_api_key(
        ctx.conn,
        ProjectId(ctx.tenant.project_id),
        name=f"victim key {next(_seq)}",
        role=Role.MEMBER,
        created_by=None,
    )
    return Call({**ctx.project, "key_id": row["id"]}, markers=(row["name"], row["prefix"]))


ROUTE_FIXTURES: dict[tuple[str, str], RouteFixture] = {
    # auth
    ("POST", "/auth/login"): _login,
    ("POST", "/auth/refresh"): _refresh,
    ("POST", "/auth/logout"): _none,
    ("POST", "/auth/password"): _password,
    ("GET", "/auth/me"): _none,
    # orgs
    ("GET", "/orgs"): _none,
    ("POST", "/orgs"): _new_org,
    ("GET", "/orgs/{org_id}"): _org,
    ("PATCH", "/orgs/{org_id}"): _org_rename,
    ("DELETE", "/orgs/{org_id}"): _org,
    # members
    ("GET", "/orgs/{org_id}/members"): _org,
    ("POST", "/orgs/{org_id}/members"): _new_member,
    ("PATCH", "/orgs/{org_id}/members/{user_id}"): _member_update,
    ("DELETE", "/orgs/{org_id}/members/{user_id}"): _member,
    # projects
    ("GET", "/orgs/{org_id}/projects"): _org,
    ("POST", "/orgs/{org_id}/projects"): _new_project,
    ("GET", "/projects/{project_id}"): _project,
    ("DELETE", "/projects/{project_id}"): _project,
    # API keys
    ("GET", "/projects/{project_id}/api-keys"): _project,
    ("POST", "/projects/{project_id}/api-keys"): _new_key,
    ("DELETE", "/projects/{project_id}/api-keys/{key_id}"): _key,
    # ---- other resources: add yours below (queues, retry policies, jobs, executions,
    # schedules, workers, dlq, metrics) ----
}
