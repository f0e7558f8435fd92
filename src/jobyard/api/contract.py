"""The OpenAPI document as the exact contract, derived from the route table.

Each `Route` yields its operation's statuses, security and operationId here, so a route added to
the table is documented without anyone remembering to:

- statuses: the route's own (`status_code` plus `Route.responses`), and those derived from
  - its scope: USER → 401, 403 (API keys refused); ORG/PROJECT → 401, 403, 404;
  - its inputs: any parameter or body → 422; a body → 400 (bytes that are not UTF-8 JSON text)
    and 415 (a body sent without a JSON Content-Type);
  - its rate limit ("auth", "enqueue") → 429 with `Retry-After`;
  - a database connection anywhere in its dependencies → 503; every route → 500.
  Every non-2xx is documented with the error envelope. `apply_contract` then removes any status
  FastAPI added on its own (its `HTTPValidationError` 422 is not what the API sends).
- security: PUBLIC → none; USER/ORG → bearer (access token); PROJECT → bearer or X-API-Key
  (bearer only when `api_keys=False`); `Route.security` overrides.
- operationId: `Route.op_id` (stated, or derived from method and path; unique per table).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import get_dependant

from jobyard.api.errors import ErrorEnvelope
from jobyard.api.routes import Route, Scope

SECURITY_SCHEMES: Final[dict[str, dict[str, Any]]] = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "An access token from POST /api/v1/auth/login, or a project API key"
        " (jy_…) on project routes that accept keys.",
    },
    "api_key": {
        "type": "apiKey",
        "in": "header",
        "name": "X-API-Key",
        "description": "A project API key (jy_…); project routes only.",
    },
}
_RETRY_AFTER: Final = {
    "Retry-After": {
        "description": "Seconds until the rate-limit window ends.",
        "schema": {"type": "integer", "minimum": 0},
    }
}
_WWW_AUTHENTICATE: Final = {
    "WWW-Authenticate": {"description": "Always `Bearer`.", "schema": {"type": "string"}}
}
_DERIVED: Final = {
    400: "the body is not JSON text (malformed, not UTF-8, or nested too deeply)",
    401: "no, invalid, expired or revoked credentials",
    403: "your role is below the route's minimum, or this credential kind is refused here",
    404: "no such resource, or another tenant's (indistinguishable on purpose)",
    415: "the body was sent without Content-Type: application/json",
    422: "invalid input; details.fields names every bad field (values are never echoed)",
    429: "rate limited; retry after Retry-After seconds",
    500: "a bug; the body holds only the request id",
    503: "the database cannot be reached",
}


def _walk(dependant: Dependant) -> Iterator[Dependant]:
    yield dependant
    for sub in dependant.dependencies:
        yield from _walk(sub)


def _inputs(dependants: list[Dependant]) -> tuple[bool, bool]:
    """(has any documented input, has a body) over a route's handler and guards."""
    has_input = has_body = False
    for dependant in (d for top in dependants for d in _walk(top)):
        params = [
            *dependant.path_params,
            *dependant.query_params,
            *dependant.header_params,
            *dependant.cookie_params,
        ]
        if any(getattr(p.field_info, "include_in_schema", True) for p in params):
            has_input = True
        if dependant.body_params:
            has_input = has_body = True
    return has_input, has_body


def _uses(dependants: list[Dependant], call: Callable[..., Any]) -> bool:
    return any(d.call is call for top in dependants for d in _walk(top))


def responses_for(
    route: Route, guards: list[Callable[..., Any]], response_model: Any
) -> dict[int | str, dict[str, Any]]:
    """Every status `route` can answer besides its `status_code`, for `add_api_route`."""
    from jobyard.api.deps import get_conn

    dependants = [get_dependant(path=route.full_path, call=c) for c in (route.handler, *guards)]
    has_input, has_body = _inputs(dependants)
    errors: dict[int, str] = {500: _DERIVED[500]}
    if route.scope is not Scope.PUBLIC:
        errors |= {401: _DERIVED[401], 403: _DERIVED[403]}
    if route.scope in (Scope.ORG, Scope.PROJECT):
        errors[404] = _DERIVED[404]
    if has_input:
        errors[422] = _DERIVED[422]
    if has_body:
        errors[400] = _DERIVED[400]
        errors[415] = _DERIVED[415]
    if route.rate_limit is not None:
        errors[429] = _DERIVED[429]
    if _uses(dependants, get_conn):
        errors[503] = _DERIVED[503]
    out: dict[int | str, dict[str, Any]] = {}
    for status, when in sorted({**errors, **route.responses}.items()):
        if status == route.status_code:
            continue
        entry: dict[str, Any] = {"description": when}
        if status >= 300:
            entry["model"] = ErrorEnvelope
        elif response_model is not None:
            entry["model"] = response_model
        if status == 429:
            entry["headers"] = _RETRY_AFTER
        if status == 401:
            entry["headers"] = _WWW_AUTHENTICATE
        out[status] = entry
    return out


def security_for(route: Route) -> list[dict[str, list[str]]]:
    if route.security is not None:
        names: tuple[str, ...] = route.security
    elif route.scope is Scope.PUBLIC:
        names = ()
    elif route.scope is Scope.PROJECT and route.api_keys:
        names = ("bearer", "api_key")
    else:
        names = ("bearer",)
    return [{name: []} if name else {} for name in names]


def apply_contract(
    schema: dict[str, Any], routes: Sequence[Route], statuses: Mapping[tuple[str, str], set[str]]
) -> None:
    """Fix in the generated document what FastAPI derives on its own: the security of each
    operation, and no status but those `responses_for` derived (`statuses`, by route key)."""
    components = schema.setdefault("components", {})
    components["securitySchemes"] = SECURITY_SCHEMES
    for route in routes:
        operation = schema["paths"][route.full_path][route.method.lower()]
        operation["security"] = security_for(route)
        expected = statuses[(route.method, route.full_path)]
        for status, response in list(operation["responses"].items()):
            if status not in expected:
                del operation["responses"][status]
            elif int(status) >= 300 and "content" in response:
                # Errors are JSON whatever the route's own media type (e.g. text/plain /metrics).
                (schema_of,) = response["content"].values()
                response["content"] = {"application/json": schema_of}
    used = repr(schema["paths"])
    schemas = components.get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        if f"#/components/schemas/{name}'" not in used:
            schemas.pop(name, None)


def install_openapi(
    app: FastAPI, routes: Sequence[Route], statuses: Mapping[tuple[str, str], set[str]]
) -> None:
    generate = app.openapi  # FastAPI's: builds once, caches in app.openapi_schema

    def contract_openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            apply_contract(generate(), routes, statuses)
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = contract_openapi  # type: ignore[method-assign]
