"""Tenant isolation and RBAC, generated from the route table (`ALL_ROUTES`).

Integrity checks keep the coverage from lapsing: the mounted app has exactly the table's routes
(plus health/docs/openapi), every route carries the guard its scope demands, a tenant id in a
path forces the matching scope, and every route has a fixture with a valid call. The generated
tests then call every ORG/PROJECT route as another tenant (404, nothing revealed, same body as a
tenant that does not exist), with the caller's own tenant id but another tenant's resource ids
(404), with every role below min_role (403), and at min_role (the route's success status).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.routing import Mount
from starlette.routing import Route as StarletteRoute

from jobyard.api import deps
from jobyard.api.routes import ALL_ROUTES, Route, Scope, classification_problems, mount_routes
from jobyard.core.auth import SigningKeys
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.web import dashboard_routers
from tests.api.conftest import KEY_ROLES, Tenant
from tests.api.route_fixtures import ROUTE_FIXTURES, Call, FixtureContext

# Routes outside the table on purpose: unauthenticated probes and the docs.
OUTSIDE_TABLE = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/api/v1/openapi.json"),
    ("HEAD", "/api/v1/openapi.json"),
    ("GET", "/api/v1/docs"),
}
OUTSIDE_TABLE_MOUNTS = {"/api/v1/docs/assets", "/static"}
# The dashboard's pages (jobyard.web.dashboard_routers()): served by the API process, never
# under /api.
DASHBOARD_ROUTES = {
    (m, r.path)
    for router in dashboard_routers()
    for r in router.routes
    if isinstance(r, StarletteRoute)
    for m in r.methods
}
GHOST_ID = 2**53 - 1  # the largest id the API takes (limits.MAX_ID); no tenant has it

TENANT_ROUTES = [r for r in ALL_ROUTES if r.scope in (Scope.ORG, Scope.PROJECT)]
SIGNED_IN_ROUTES = [r for r in ALL_ROUTES if r.scope is not Scope.PUBLIC]


def route_id(route: Route) -> str:
    return f"{route.method} {route.full_path}"


def tenant_param(route: Route) -> str:
    return "project_id" if route.scope is Scope.PROJECT else "org_id"


async def send(
    client: httpx.AsyncClient,
    route: Route,
    call: Call,
    headers: dict[str, str],
    path_params: dict[str, Any] | None = None,
) -> httpx.Response:
    path = route.full_path.format(**(path_params or call.path_params))
    return await client.request(
        route.method, path, json=call.json, params=call.params, headers=headers
    )


async def make_call(route: Route, conn: Conn, tenant: Tenant, keys: SigningKeys) -> Call:
    fixture = ROUTE_FIXTURES.get(route.key)
    assert fixture is not None, f"no fixture for {route_id(route)} in tests/api/route_fixtures.py"
    return await fixture(FixtureContext(conn, tenant, keys))


def assert_envelope(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details", "request_id"}, body
    assert body["error"]["code"] == code, body
    assert body["error"]["request_id"] == response.headers["x-request-id"]
    return dict(body["error"])


def assert_reveals_nothing(response: httpx.Response, secrets: tuple[str, ...]) -> None:
    leaked = [s for s in secrets if s and s in response.text]
    assert not leaked, f"response reveals {leaked}: {response.text}"
    assert response.json()["error"]["details"] == {}, response.text


def comparable(response: httpx.Response) -> tuple[int, str, str]:
    err = response.json()["error"]
    return response.status_code, err["code"], err["message"]


# ----------------------------------------------------------------------------- integrity


def _table_paths() -> set[tuple[str, str]]:
    return {(r.method, r.full_path) for r in ALL_ROUTES}


def test_mounted_routes_are_exactly_the_table(app: FastAPI) -> None:
    mounted: set[tuple[str, str]] = set()
    mounts: set[str] = set()
    for r in app.routes:
        if isinstance(r, Mount):
            mounts.add(r.path)
        elif isinstance(r, StarletteRoute):
            mounted |= {(m, r.path) for m in (r.methods or ())}
        else:
            pytest.fail(f"unexpected kind of route mounted: {r!r}")
    assert not {p for _, p in DASHBOARD_ROUTES if p.startswith("/api") or p == "/metrics"}
    expected = _table_paths() | OUTSIDE_TABLE | DASHBOARD_ROUTES
    assert mounted - expected == set(), "mounted outside mount_routes (backdoor?)"
    assert expected - mounted == set(), "in the table but not mounted"
    assert mounts == OUTSIDE_TABLE_MOUNTS


def test_route_table_classification_is_safe() -> None:
    assert classification_problems(ALL_ROUTES) == []


def test_a_tenant_id_in_the_path_forces_its_scope() -> None:
    """The check itself must fail on a misclassified route (so the table cannot drift)."""
    sneaky = Route("GET", "/projects/{project_id}/things", Scope.USER, lambda: None)
    also = Route(
        "GET", "/orgs/{org_id}/things", Scope.PUBLIC, lambda: None, operation_id="org_things"
    )
    problems = classification_problems([sneaky, also])
    assert len(problems) == 2, problems
    with pytest.raises(ValueError, match=r"must be Scope\.PROJECT"):
        mount_routes(FastAPI(), [sneaky])


def _walk(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _walk(sub)


def _api_routes(app: FastAPI) -> dict[tuple[str, str], APIRoute]:
    found: dict[tuple[str, str], APIRoute] = {}
    for r in app.routes:
        if isinstance(r, APIRoute):
            for method in r.methods:
                found[(method, r.path)] = r
    return found


def test_every_route_carries_the_guard_of_its_scope(app: FastAPI) -> None:
    mounted = _api_routes(app)
    wrong: list[str] = []
    for route in ALL_ROUTES:
        api_route = mounted[(route.method, route.full_path)]
        # Route-level dependencies come first, so the guard runs before anything else.
        guards = [
            d.call for d in api_route.dependant.dependencies if hasattr(d.call, "jobyard_scope")
        ]
        if len(guards) != 1:
            wrong.append(f"{route_id(route)}: {len(guards)} guards")
            continue
        guard = guards[0]
        if (guard.jobyard_scope, guard.jobyard_min_role) != (route.scope, route.min_role):
            wrong.append(f"{route_id(route)}: guard {guard.jobyard_scope}/{guard.jobyard_min_role}")
        if route.scope is Scope.PROJECT and guard.jobyard_api_keys != route.api_keys:
            wrong.append(f"{route_id(route)}: api_keys mismatch")
    assert wrong == []


def test_handlers_only_ask_for_the_tenant_their_scope_guards(app: FastAPI) -> None:
    allowed = {
        deps.get_project_access: {Scope.PROJECT},
        deps.get_org_access: {Scope.ORG},
        deps.get_user: {Scope.USER, Scope.ORG},
    }
    mounted = _api_routes(app)
    wrong = []
    for route in ALL_ROUTES:
        calls = set(_walk(mounted[(route.method, route.full_path)].dependant))
        for dep, scopes in allowed.items():
            if dep in calls and route.scope not in scopes:
                wrong.append(f"{route_id(route)} uses {dep.__name__} but is {route.scope}")
    assert wrong == []


def test_every_route_has_a_fixture() -> None:
    missing = [route_id(r) for r in ALL_ROUTES if r.key not in ROUTE_FIXTURES]
    assert not missing, (
        "add a fixture (valid path params and body) to ROUTE_FIXTURES in "
        "tests/api/route_fixtures.py for:\n  " + "\n  ".join(missing)
    )


def test_every_fixture_names_a_route_in_the_table() -> None:
    keys = {r.key for r in ALL_ROUTES}
    stale = sorted(k for k in ROUTE_FIXTURES if k not in keys)
    assert not stale, f"fixtures for routes that do not exist: {stale}"


def test_every_route_is_documented_with_its_scope(client_openapi: dict[str, Any]) -> None:
    for route in ALL_ROUTES:
        operation = client_openapi["paths"][route.full_path][route.method.lower()]
        assert operation["x-scope"] == route.scope, route_id(route)
        assert inspect.iscoroutinefunction(route.handler), f"{route_id(route)}: make it async"


@pytest.fixture
def client_openapi(app: FastAPI) -> dict[str, Any]:
    return json.loads(json.dumps(app.openapi()))


# ----------------------------------------------------------------------------- generated


@pytest.mark.parametrize("route", TENANT_ROUTES, ids=route_id)
async def test_another_tenant_gets_404_and_learns_nothing(
    route: Route,
    client: httpx.AsyncClient,
    conn: Conn,
    tenant_a: Tenant,
    tenant_b: Tenant,
    signing_keys: SigningKeys,
) -> None:
    victim = await make_call(route, conn, tenant_b, signing_keys)
    secrets = (*tenant_b.markers, *victim.markers)
    key = tenant_param(route)
    ghost_params = {**victim.path_params, key: GHOST_ID}
    callers = {"owner": tenant_a.headers(Role.OWNER)}
    if route.scope is Scope.PROJECT:
        callers["admin key"] = tenant_a.key_headers(Role.ADMIN)
    for who, headers in callers.items():
        response = await send(client, route, victim, headers)
        assert response.status_code == 404, (who, response.status_code, response.text)
        assert_envelope(response, 404, "not_found")
        assert_reveals_nothing(response, secrets)
        # Exactly what a tenant that does not exist answers: existence is not revealed.
        ghost = await send(client, route, victim, headers, ghost_params)
        assert comparable(response) == comparable(ghost), who
    if route.scope is Scope.ORG:
        # API keys never reach org routes, whichever org: a flat 403 that names nothing.
        response = await send(client, route, victim, tenant_a.key_headers(Role.ADMIN))
        assert_envelope(response, 403, "forbidden")
        assert_reveals_nothing(response, secrets)


OBJECT_ROUTES = [r for r in TENANT_ROUTES if len(r.path_params) > 1]


@pytest.mark.parametrize("route", OBJECT_ROUTES, ids=route_id)
async def test_own_tenant_id_with_another_tenants_object_is_404(
    route: Route,
    client: httpx.AsyncClient,
    conn: Conn,
    tenant_a: Tenant,
    tenant_b: Tenant,
    signing_keys: SigningKeys,
) -> None:
    """The guard admits the caller to their own tenant; the handler must still scope every
    object lookup by it (no IDOR through a foreign object id)."""
    victim = await make_call(route, conn, tenant_b, signing_keys)
    key = tenant_param(route)
    own_id = tenant_a.project_id if key == "project_id" else tenant_a.org_id
    mixed = {**victim.path_params, key: own_id}
    ghosts = {k: (GHOST_ID if k != key else own_id) for k in victim.path_params}
    response = await send(client, route, victim, tenant_a.headers(Role.OWNER), mixed)
    assert response.status_code == 404, (response.status_code, response.text)
    assert_reveals_nothing(response, (*tenant_b.markers, *victim.markers))
    ghost = await send(client, route, victim, tenant_a.headers(Role.OWNER), ghosts)
    assert comparable(response) == comparable(ghost)


@pytest.mark.parametrize("route", TENANT_ROUTES, ids=route_id)
async def test_roles_below_min_role_are_refused(
    route: Route,
    client: httpx.AsyncClient,
    conn: Conn,
    tenant_a: Tenant,
    signing_keys: SigningKeys,
) -> None:
    assert route.min_role is not None
    min_role = route.min_role
    call = await make_call(route, conn, tenant_a, signing_keys)
    refused: dict[str, dict[str, str]] = {
        f"user {role}": tenant_a.headers(role) for role in Role if not role.at_least(min_role)
    }
    for role in KEY_ROLES:
        usable = route.scope is Scope.PROJECT and route.api_keys and role.at_least(min_role)
        if not usable:
            refused[f"key {role}"] = tenant_a.key_headers(role)
    for who, headers in refused.items():
        response = await send(client, route, call, headers)
        assert response.status_code == 403, (who, response.status_code, response.text)
        assert_envelope(response, 403, "forbidden")
    # At exactly min_role the same call succeeds: the fixture is valid, so the refusals above
    # came from the guard, not from validation.
    response = await send(client, route, call, tenant_a.headers(min_role))
    expected = call.ok_status or route.status_code
    assert response.status_code == expected, (response.status_code, response.text)


@pytest.mark.parametrize("route", [r for r in ALL_ROUTES if r.scope is Scope.USER], ids=route_id)
async def test_user_routes_refuse_api_keys(
    route: Route,
    client: httpx.AsyncClient,
    conn: Conn,
    tenant_a: Tenant,
    signing_keys: SigningKeys,
) -> None:
    call = await make_call(route, conn, tenant_a, signing_keys)
    response = await send(client, route, call, tenant_a.key_headers(Role.ADMIN))
    assert_envelope(response, 403, "forbidden")
    response = await send(client, route, call, tenant_a.headers(Role.VIEWER))
    assert response.status_code == (call.ok_status or route.status_code), response.text


@pytest.mark.parametrize("route", SIGNED_IN_ROUTES, ids=route_id)
async def test_no_credentials_is_401(
    route: Route,
    client: httpx.AsyncClient,
    conn: Conn,
    tenant_a: Tenant,
    signing_keys: SigningKeys,
) -> None:
    call = await make_call(route, conn, tenant_a, signing_keys)
    response = await send(client, route, call, {})
    assert_envelope(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"] == "Bearer"
