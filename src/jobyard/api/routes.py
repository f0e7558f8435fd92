"""Routes as data: every API route is one `Route` entry; `mount_routes` is the only place a
handler is attached to the app, and it attaches the access guard by scope. The same table feeds
OpenAPI (through FastAPI) and the generated isolation tests (tests/api/test_isolation.py).

Resource modules (api/resources/*.py) each expose `ROUTES: tuple[Route, ...]`; the modules are
listed by name in `api/resources/__init__.py` and assembled by `all_routes()` (also available as
`ALL_ROUTES`). Assembly is lazy so a resource module can import `Route` from here without a cycle.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.params import Depends as DependsParam

from jobyard.domain.enums import Role

API_PREFIX = "/api/v1"
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_PARAM = re.compile(r"{([a-z_]+)}")


class Scope(StrEnum):
    PUBLIC = "public"  # no credentials (login, refresh, health)
    USER = "user"  # any signed-in user; acts on their own account only
    ORG = "org"  # path has {org_id}; caller must be a member with at least min_role
    PROJECT = "project"  # path has {project_id}; caller's org membership (or API key) must cover it


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # relative to `prefix`, e.g. "/projects/{project_id}/jobs"
    scope: Scope
    handler: Callable[..., Any]
    min_role: Role | None = None  # required for ORG and PROJECT scopes
    status_code: int = 200
    summary: str = ""
    response_model: Any = None
    tags: Sequence[str] = field(default_factory=tuple)
    # "auth" → 5 attempts / 15 min / client IP, checked before the handler runs. "login" → the
    # handler counts failed attempts per account and IP itself (it needs the body's email), as
    # the jobs resource counts enqueues (`jobyard.api.ratelimit`); both can answer 429.
    rate_limit: str | None = None
    # Everything lives under /api/v1; "" mounts at the root (e.g. Prometheus at /metrics).
    prefix: str = API_PREFIX
    # False: API keys are refused (403) even with a high enough role — e.g. a leaked key must
    # not be able to mint more keys. Only meaningful for PROJECT routes (keys reach no others).
    api_keys: bool = True

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"{self.method} {self.path}: method must be one of {sorted(METHODS)}")
        if self.scope in (Scope.ORG, Scope.PROJECT) and self.min_role is None:
            raise ValueError(f"{self.method} {self.path}: {self.scope} routes need a min_role")
        if self.scope is Scope.PROJECT and "{project_id}" not in self.path:
            raise ValueError(f"{self.method} {self.path}: project routes need {{project_id}}")
        if self.scope is Scope.ORG and "{org_id}" not in self.path:
            raise ValueError(f"{self.method} {self.path}: org routes need {{org_id}}")
        if self.rate_limit not in (None, "auth", "login"):
            raise ValueError(f"{self.method} {self.path}: unknown rate_limit {self.rate_limit!r}")

    @property
    def full_path(self) -> str:
        return self.prefix + self.path

    @property
    def key(self) -> tuple[str, str]:
        """(method, path) — how tests and fixtures name a route."""
        return (self.method, self.path)

    @property
    def path_params(self) -> tuple[str, ...]:
        return tuple(_PARAM.findall(self.path))


def classification_problems(routes: Sequence[Route]) -> list[str]:
    """Why a table is unsafe to mount, one line per problem (empty when it is fine).

    A tenant id in the path decides the scope: a route that names {project_id} but is not
    PROJECT-scoped would be mounted without the project guard and leak across tenants.
    """
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for route in routes:
        name = f"{route.method} {route.full_path}"
        if (route.method, route.full_path) in seen:
            problems.append(f"{name}: defined twice")
        seen.add((route.method, route.full_path))
        params = route.path_params
        if "project_id" in params and route.scope is not Scope.PROJECT:
            problems.append(f"{name}: names {{project_id}} so it must be Scope.PROJECT")
        elif "org_id" in params and route.scope not in (Scope.ORG, Scope.PROJECT):
            problems.append(f"{name}: names {{org_id}} so it must be Scope.ORG")
        if route.scope is Scope.PUBLIC and route.min_role is not None:
            problems.append(f"{name}: public routes take no min_role")
    return problems


@cache
def all_routes() -> tuple[Route, ...]:
    """Every route of every module listed in api/resources/__init__.py, in that order."""
    from jobyard.api.resources import MODULES

    routes: list[Route] = []
    for name in MODULES:
        module = importlib.import_module(f"jobyard.api.resources.{name}")
        table = getattr(module, "ROUTES", None)
        if not isinstance(table, tuple) or not all(isinstance(r, Route) for r in table):
            raise TypeError(f"jobyard.api.resources.{name}.ROUTES must be a tuple of Route")
        routes.extend(table)
    problems = classification_problems(routes)
    if problems:
        raise ValueError("unsafe route table:\n  " + "\n  ".join(problems))
    return tuple(routes)


def __getattr__(name: str) -> tuple[Route, ...]:
    # `from jobyard.api.routes import ALL_ROUTES` assembles the table on first use.
    if name == "ALL_ROUTES":
        return all_routes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def mount_routes(app: FastAPI, routes: Sequence[Route]) -> None:
    """Attach every route, each behind the guard its scope demands. Refuses an unsafe table."""
    from jobyard.api import rbac
    from jobyard.api.errors import error_responses

    problems = classification_problems(routes)
    if problems:
        raise ValueError("unsafe route table:\n  " + "\n  ".join(problems))
    for route in routes:
        dependencies: list[DependsParam] = []
        if route.rate_limit == "auth":
            dependencies.append(Depends(rbac.auth_rate_limit))
        dependencies.append(Depends(rbac.guard_for(route.scope, route.min_role, route.api_keys)))
        extra: dict[str, Any] = {}
        if route.response_model is not None:  # else FastAPI infers it from the return type
            extra["response_model"] = route.response_model
        app.add_api_route(
            route.full_path,
            route.handler,
            methods=[route.method],
            status_code=route.status_code,
            summary=route.summary or None,
            tags=list(route.tags),
            **extra,
            dependencies=dependencies,
            responses=error_responses(route.scope),
            openapi_extra={
                "x-scope": str(route.scope),
                "x-min-role": str(route.min_role) if route.min_role else None,
                "x-api-keys": route.scope is Scope.PROJECT and route.api_keys,
            },
        )
