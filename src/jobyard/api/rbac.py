"""The access guard, attached by `mount_routes` according to each route's scope.

Order of refusals: no or bad credentials → 401; a tenant the caller cannot see (another org's,
or one that does not exist — indistinguishable on purpose) → 404; the caller's tenant but a role
below the route's min_role → 403. Roles compare by rank: viewer < member < admin < owner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from typing import Annotated, Any

from fastapi import Path, Request

from jobyard.api.auth import Principal
from jobyard.api.deps import ConnDep, OrgAccess, PrincipalDep, ProjectAccess
from jobyard.api.ratelimit import enforce_auth_limit
from jobyard.api.routes import Scope
from jobyard.core.auth import PermissionDenied, user_org_access, user_project_access
from jobyard.db.pool import Conn
from jobyard.domain import limits
from jobyard.domain.enums import Role
from jobyard.domain.errors import NotFound
from jobyard.domain.ids import OrgId, ProjectId

Guard = Callable[..., Awaitable[None]]
_MAX_ID = limits.MAX_ID


# The guard declares the tenant id it reads, so OpenAPI documents it on every ORG/PROJECT route
# (with its type and bounds) and a malformed one is a 422 naming it, like any other id.
OrgIdPath = Annotated[int, Path(ge=1, le=_MAX_ID, description="The organization's id.")]
ProjectIdPath = Annotated[int, Path(ge=1, le=_MAX_ID, description="The project's id.")]


def _require(role: Role, min_role: Role) -> None:
    if not role.at_least(min_role):
        raise PermissionDenied(f"this action needs the {min_role} role or higher; you are {role}")


async def _project_access(
    conn: Conn, principal: Principal, project_id: int, min_role: Role, api_keys: bool
) -> ProjectAccess:
    not_found = NotFound("project not found")
    if principal.api_key is not None:
        key = principal.api_key
        if key.project_id != project_id:
            raise not_found
        if not api_keys:
            raise PermissionDenied("API keys cannot call this route; sign in as a user")
        _require(key.role, min_role)
        return ProjectAccess(key.project_id, key.org_id, key.role, principal)
    assert principal.user is not None
    access = await user_project_access(conn, principal.user.id, project_id)
    if access is None:
        raise not_found
    _require(access.role, min_role)
    return ProjectAccess(ProjectId(project_id), access.org_id, access.role, principal)


async def _org_access(conn: Conn, principal: Principal, org_id: int, min_role: Role) -> OrgAccess:
    if principal.user is None:
        raise PermissionDenied("API keys can only call project routes")
    access = await user_org_access(conn, principal.user.id, org_id)
    if access is None:
        raise NotFound("organization not found")
    _require(access.role, min_role)
    return OrgAccess(OrgId(org_id), access.role, principal)


def _mark(guard: Any, scope: Scope, min_role: Role | None, api_keys: bool = True) -> Guard:
    # Tests read these to prove every mounted route carries the guard its table entry demands.
    guard.jobyard_scope = scope
    guard.jobyard_min_role = min_role
    guard.jobyard_api_keys = api_keys
    typed: Guard = guard
    return typed


@cache
def guard_for(scope: Scope, min_role: Role | None, api_keys: bool = True) -> Guard:
    """The dependency that admits a caller to a route of this scope (one per scope and role)."""
    if scope is Scope.PUBLIC:

        async def public_guard() -> None:
            return None

        return _mark(public_guard, scope, min_role)

    if scope is Scope.USER:

        async def user_guard(request: Request, principal: PrincipalDep) -> None:
            if principal.user is None:
                raise PermissionDenied("API keys can only call project routes")
            request.scope.setdefault("state", {})["principal"] = principal

        return _mark(user_guard, scope, min_role)

    assert min_role is not None
    required: Role = min_role

    if scope is Scope.ORG:

        async def org_guard(
            request: Request, conn: ConnDep, principal: PrincipalDep, org_id: OrgIdPath
        ) -> None:
            access = await _org_access(conn, principal, org_id, required)
            state = request.scope.setdefault("state", {})
            state["principal"] = principal
            state["org_access"] = access

        return _mark(org_guard, scope, min_role)

    async def project_guard(
        request: Request, conn: ConnDep, principal: PrincipalDep, project_id: ProjectIdPath
    ) -> None:
        access = await _project_access(conn, principal, project_id, required, api_keys)
        state = request.scope.setdefault("state", {})
        state["principal"] = principal
        state["project_access"] = access

    return _mark(project_guard, scope, min_role, api_keys)


async def auth_rate_limit(request: Request, conn: ConnDep) -> None:
    """5 attempts / 15 min / client IP on each auth route, counted before credentials are read."""
    await enforce_auth_limit(conn, request)
