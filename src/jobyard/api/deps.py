"""Annotated dependencies every handler uses.

- `ConnDep`: a pooled connection for this request (autocommit; open `conn.transaction()` for
  several statements). The guard and the handler share the same one.
- `PrincipalDep`: who is calling (a user or an API key); 401 without valid credentials.
- `ProjectDep` / `OrgDep`: the tenant the route's guard admitted the caller to, with the caller's
  role. They only read what the guard stored, so they work only on PROJECT / ORG routes; the
  tenant id always comes from there, never from a query or body parameter.
- `UserDep`: the signed-in user (USER routes; API keys are refused there).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Final

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import Field, TypeAdapter, ValidationError

from jobyard.api.auth import Principal, resolve_principal
from jobyard.core.auth import SessionUser, SigningKeys
from jobyard.db.pool import Conn, Pool
from jobyard.domain import limits
from jobyard.domain.enums import Role
from jobyard.domain.ids import OrgId, ProjectId, UserId
from jobyard.domain.settings import Settings

# Seconds a request waits for a pooled connection before answering 503.
POOL_TIMEOUT_S = 10.0

_bearer = HTTPBearer(auto_error=False, scheme_name="bearer", description="Access token or API key")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="api_key")


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_keys(request: Request) -> SigningKeys:
    keys: SigningKeys = request.app.state.keys
    return keys


def get_pool(request: Request) -> Pool:
    pool: Pool = request.app.state.pool
    return pool


async def get_conn(request: Request) -> AsyncIterator[Conn]:
    async with get_pool(request).connection(timeout=POOL_TIMEOUT_S) as conn:
        yield conn


SettingsDep = Annotated[Settings, Depends(get_settings)]
KeysDep = Annotated[SigningKeys, Depends(get_keys)]
ConnDep = Annotated[Conn, Depends(get_conn)]


async def get_principal(
    conn: ConnDep,
    keys: KeysDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    api_key: Annotated[str | None, Depends(_api_key)],
) -> Principal:
    return await resolve_principal(
        conn, keys, bearer=bearer.credentials if bearer else None, api_key=api_key
    )


PrincipalDep = Annotated[Principal, Depends(get_principal)]


@dataclass(frozen=True)
class ProjectAccess:
    project_id: ProjectId
    org_id: OrgId
    role: Role
    principal: Principal

    @property
    def user_id(self) -> UserId | None:
        """The acting user, or None when an API key is calling."""
        return self.principal.user.id if self.principal.user else None


@dataclass(frozen=True)
class OrgAccess:
    org_id: OrgId
    role: Role
    principal: Principal

    @property
    def user_id(self) -> UserId:
        assert self.principal.user is not None  # ORG routes admit users only
        return self.principal.user.id


# The path parameter each tenant guard validates, and its bounds (as rbac declares them).
_TENANT_PARAMS: Final = {"org_access": "org_id", "project_access": "project_id"}
_TENANT_ID: Final = TypeAdapter(Annotated[int, Field(ge=1, le=limits.MAX_ID)])


def _guarded(request: Request, key: str) -> Any:
    value = request.scope.get("state", {}).get(key)
    if value is None:
        param = _TENANT_PARAMS.get(key)
        if param is not None and param in request.path_params:
            # FastAPI skips a guard whose path parameter fails validation but still solves the
            # handler's other dependencies before it reports that: report it here instead.
            try:
                _TENANT_ID.validate_python(request.path_params[param])
            except ValidationError as exc:
                raise RequestValidationError(
                    [{**e, "loc": ("path", param)} for e in exc.errors()]
                ) from None
        # A handler asked for a tenant its route's scope does not guard: a wiring bug.
        raise RuntimeError(f"{request.method} {request.url.path}: no {key} (wrong Route scope?)")
    return value


def get_project_access(request: Request) -> ProjectAccess:
    access: ProjectAccess = _guarded(request, "project_access")
    return access


def get_org_access(request: Request) -> OrgAccess:
    access: OrgAccess = _guarded(request, "org_access")
    return access


def get_user(request: Request) -> SessionUser:
    principal: Principal = _guarded(request, "principal")
    if principal.user is None:
        raise RuntimeError(f"{request.method} {request.url.path}: USER route without a user")
    return principal.user


ProjectDep = Annotated[ProjectAccess, Depends(get_project_access)]
OrgDep = Annotated[OrgAccess, Depends(get_org_access)]
UserDep = Annotated[SessionUser, Depends(get_user)]
