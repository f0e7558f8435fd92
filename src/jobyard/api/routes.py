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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import Any

from fastapi import Depends, FastAPI

from jobyard.domain.enums import Role

API_PREFIX = "/api/v1"
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_PARAM = re.compile(r"{([a-z_]+)}")
_OPERATION_ID = re.compile(r"[a-z][a-z0-9_]{2,47}")
RATE_LIMITS = frozenset({None, "auth", "login", "enqueue"})
# Verbs of derived operation ids, for a path ending in an id / in a collection.
_ITEM_VERBS = {"GET": "get", "PATCH": "update", "PUT": "replace", "DELETE": "delete",
               "POST": "post"}  # fmt: skip
_COLLECTION_VERBS = {"GET": "list", "POST": "create", "PATCH": "update", "PUT": "replace",
                     "DELETE": "delete"}  # fmt: skip


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
    # handler counts failed attempts per account and IP itself (it needs the body's email).
    # "enqueue" → the handler counts jobs against the project's enqueue limit (it calls
    # `enforce_enqueue_limit`; a batch counts each job). Every kind documents 429 + Retry-After.
    rate_limit: str | None = None
    # Everything lives under /api/v1; "" mounts at the root (e.g. Prometheus at /metrics).
    prefix: str = API_PREFIX
    # False: API keys are refused (403) even with a high enough role — e.g. a leaked key must
    # not be able to mint more keys. Only meaningful for PROJECT routes (keys reach no others).
    api_keys: bool = True
    # OpenAPI operationId: short, stable, unique. Empty → derived from method and path
    # (`derived_operation_id`); state one when the derived name would be unclear.
    operation_id: str = ""
    # Statuses the handler itself can answer besides `status_code`, beyond those derived from the
    # scope, inputs and rate limit (see api/contract.py): {status: when}. A 2xx is documented
    # with the response model, anything else with the error envelope.
    responses: Mapping[int, str] = field(default_factory=dict)
    # "text/plain" for non-JSON bodies (Prometheus); the handler returns a Response.
    media_type: str = "application/json"
    # OpenAPI security requirement names, overriding the scope's default; "" = anonymous allowed.
    security: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"{self.method} {self.path}: method must be one of {sorted(METHODS)}")
        if self.scope in (Scope.ORG, Scope.PROJECT) and self.min_role is None:
            raise ValueError(f"{self.method} {self.path}: {self.scope} routes need a min_role")
        if self.scope is Scope.PROJECT and "{project_id}" not in self.path:
            raise ValueError(f"{self.method} {self.path}: project routes need {{project_id}}")
        if self.scope is Scope.ORG and "{org_id}" not in self.path:
            raise ValueError(f"{self.method} {self.path}: org routes need {{org_id}}")
        if self.operation_id and not _OPERATION_ID.fullmatch(self.operation_id):
            raise ValueError(f"{self.method} {self.path}: operation_id must match {_OPERATION_ID}")
        if self.rate_limit not in RATE_LIMITS:
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

    @property
    def op_id(self) -> str:
        return self.operation_id or derived_operation_id(self.method, self.path)


def derived_operation_id(method: str, path: str) -> str:
    """`<resource>_<verb>` from the path: the tenant prefix (`/orgs/{org_id}`,
    `/projects/{project_id}`) is dropped unless nothing follows it; the static segments name the
    resource; a path ending in an action segment (`/jobs/{job_id}/cancel`) is named by it,
    otherwise the verb follows the method (`list`/`create` on a collection, `get`/`update`/
    `delete` on an item). POST /projects/{project_id}/queues/{queue_id}/pause → queues_pause."""
    parts = [p for p in path.split("/") if p]
    if len(parts) > 2 and parts[1] in ("{org_id}", "{project_id}"):
        parts = parts[2:]
    statics = [p.replace("-", "_") for p in parts if not p.startswith("{")]
    ends_in_id = parts[-1].startswith("{")
    if len(statics) > 1 and not ends_in_id:
        return "_".join(statics)
    verbs = _ITEM_VERBS if ends_in_id else _COLLECTION_VERBS
    return "_".join([*statics, verbs[method]])


def classification_problems(routes: Sequence[Route]) -> list[str]:
    """Why a table is unsafe to mount, one line per problem (empty when it is fine).

    A tenant id in the path decides the scope: a route that names {project_id} but is not
    PROJECT-scoped would be mounted without the project guard and leak across tenants.
    """
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    op_ids: dict[str, str] = {}
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
        if route.op_id in op_ids:
            problems.append(
                f"{name}: operationId {route.op_id!r} is also {op_ids[route.op_id]}'s;"
                " state a distinct Route(operation_id=...)"
            )
        op_ids.setdefault(route.op_id, name)
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
    """Attach every route, each behind the guard its scope demands, and make the OpenAPI
    document their exact contract (api/contract.py). Refuses an unsafe table."""
    from fastapi.responses import JSONResponse, PlainTextResponse

    from jobyard.api import rbac
    from jobyard.api.contract import install_openapi, responses_for

    problems = classification_problems(routes)
    if problems:
        raise ValueError("unsafe route table:\n  " + "\n  ".join(problems))
    statuses: dict[tuple[str, str], set[str]] = {}
    for route in routes:
        guards: list[Callable[..., Any]] = []
        if route.rate_limit == "auth":
            guards.append(rbac.auth_rate_limit)
        guards.append(rbac.guard_for(route.scope, route.min_role, route.api_keys))
        extra: dict[str, Any] = {}
        if route.response_model is not None:  # else FastAPI infers it from the return type
            extra["response_model"] = route.response_model
        if route.media_type == "text/plain":
            extra["response_class"] = PlainTextResponse
        else:
            extra["response_class"] = JSONResponse
        responses = responses_for(route, guards, route.response_model)
        statuses[(route.method, route.full_path)] = {str(route.status_code), *map(str, responses)}
        app.add_api_route(
            route.full_path,
            route.handler,
            methods=[route.method],
            status_code=route.status_code,
            summary=route.summary or None,
            tags=list(route.tags),
            operation_id=route.op_id,
            **extra,
            dependencies=[Depends(guard) for guard in guards],
            responses=responses,
            openapi_extra={
                "x-scope": str(route.scope),
                "x-min-role": str(route.min_role) if route.min_role else None,
                "x-api-keys": route.scope is Scope.PROJECT and route.api_keys,
            },
        )
    install_openapi(app, routes, statuses)
