"""The served OpenAPI document is the exact contract, derived from the route table.

Every check walks ALL_ROUTES, so a route added to the table is covered with no edit here: its
path parameters are declared with their type, every status it can answer is documented with the
error envelope, its security and operationId are stated, and the document passes
openapi-spec-validator. The generated client (test_generated_client.py) and schemathesis
(test_schemathesis.py) hold the document to what the running server does.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from openapi_spec_validator import validate

from jobyard.api.contract import security_for
from jobyard.api.routes import ALL_ROUTES, Route, Scope, derived_operation_id
from jobyard.core.ratelimit import ENQUEUE_LIMIT
from jobyard.domain import limits
from jobyard.domain.enums import Role
from tests.api.conftest import Tenant

ENVELOPE = "#/components/schemas/ErrorEnvelope"
# operationIds clients are generated with: renaming one breaks every client, so a rename must be
# deliberate (edit this list and say so in docs/API.md). New routes need no entry here.
STABLE_IDS = {
    ("POST", "/auth/login"): "auth_login",
    ("GET", "/auth/me"): "auth_me",
    ("POST", "/orgs"): "orgs_create",
    ("POST", "/projects/{project_id}/queues"): "queues_create",
    ("GET", "/projects/{project_id}/jobs"): "jobs_list",
    ("POST", "/projects/{project_id}/jobs"): "jobs_enqueue",
    ("POST", "/projects/{project_id}/jobs/batch"): "jobs_enqueue_batch",
    ("GET", "/projects/{project_id}/jobs/{job_id}"): "jobs_get",
    ("POST", "/projects/{project_id}/jobs/{job_id}/cancel"): "jobs_cancel",
    ("GET", "/projects/{project_id}/dead-letters"): "dlq_list",
    ("POST", "/projects/{project_id}/dead-letters/{dlq_id}/replay"): "dlq_replay",
    ("GET", "/metrics"): "metrics_prometheus",
    ("GET", "/projects/{project_id}/metrics"): "metrics_project",
}


async def served(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def operation(document: dict[str, Any], route: Route) -> dict[str, Any]:
    op: dict[str, Any] = document["paths"][route.full_path][route.method.lower()]
    return op


async def test_the_served_document_passes_openapi_spec_validator(
    client: httpx.AsyncClient,
) -> None:
    document = await served(client)
    validate(document)  # raises OpenAPIValidationError naming the first problem
    operations = [(m, p) for p, item in document["paths"].items() for m in item]
    assert len(operations) == len(ALL_ROUTES)


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


async def test_bounds_are_json_schema_keywords(client: httpx.AsyncClient) -> None:
    """pydantic writes a bound it cannot place as `ge`/`le`, which every consumer ignores."""
    document = await served(client)
    assert not _keys(document["paths"]) & {"ge", "le", "gt", "lt"}
    assert not _keys(document["components"]["schemas"]) & {"ge", "le", "gt", "lt"}


async def test_every_path_parameter_is_declared_with_its_type(client: httpx.AsyncClient) -> None:
    document = await served(client)
    for route in ALL_ROUTES:
        declared = {
            p["name"]: p
            for p in operation(document, route).get("parameters", [])
            if p["in"] == "path"
        }
        assert set(declared) == set(route.path_params), f"{route.method} {route.full_path}"
        for name, param in declared.items():
            assert param["required"] is True
            schema = param["schema"]
            if not name.endswith("_id"):  # e.g. a failure group's fingerprint: a typed string
                assert schema["type"] == "string" and schema["pattern"], (route.path, name)
                continue
            assert schema["type"] == "integer" and schema["minimum"] == 1, (route.path, name)
            assert schema["maximum"] == limits.MAX_ID, (route.path, name)


def _statuses(route: Route) -> set[int]:
    """What any route of this shape must document (a floor: routes add their own)."""
    must = {route.status_code, 500, 503}
    if route.scope is not Scope.PUBLIC:
        must |= {401, 403}
    if route.scope in (Scope.ORG, Scope.PROJECT):
        must |= {404, 422}
    if route.path_params:
        must.add(422)
    if route.rate_limit:
        must.add(429)
    return must | set(route.responses)


async def test_every_status_is_documented_and_errors_are_the_envelope(
    client: httpx.AsyncClient,
) -> None:
    document = await served(client)
    for route in ALL_ROUTES:
        op = operation(document, route)
        documented = {int(s) for s in op["responses"]}
        name = f"{route.method} {route.full_path}"
        assert _statuses(route) <= documented, (name, sorted(_statuses(route) - documented))
        if "requestBody" in op:
            assert {400, 422} <= documented, name
        for status, response in op["responses"].items():
            if int(status) >= 300:
                assert response["content"] == {"application/json": {"schema": {"$ref": ENVELOPE}}}
        if route.rate_limit:
            assert "Retry-After" in op["responses"]["429"]["headers"], name
    # FastAPI's own 422 schema is never what the API sends, so it is not in the document.
    assert "HTTPValidationError" not in document["components"]["schemas"]


async def test_enqueue_documents_its_other_success_and_cancel_its_200(
    client: httpx.AsyncClient,
) -> None:
    document = await served(client)
    paths = document["paths"]
    enqueue = paths["/api/v1/projects/{project_id}/jobs"]["post"]["responses"]
    assert {"200", "202", "409", "429"} <= set(enqueue)
    assert enqueue["200"]["content"] == enqueue["202"]["content"]
    cancel = paths["/api/v1/projects/{project_id}/jobs/{job_id}/cancel"]["post"]["responses"]
    assert {"200", "202", "409"} <= set(cancel)
    batch = paths["/api/v1/projects/{project_id}/jobs/batch"]["post"]["responses"]
    assert "429" in batch and "Retry-After" in batch["429"]["headers"]


async def test_security_is_declared_per_operation(client: httpx.AsyncClient) -> None:
    document = await served(client)
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearer"] == {**schemes["bearer"], "type": "http", "scheme": "bearer"}
    assert schemes["api_key"] == {**schemes["api_key"], "type": "apiKey", "name": "X-API-Key"}
    for route in ALL_ROUTES:
        security = operation(document, route)["security"]
        assert security == security_for(route)
        names = {name for requirement in security for name in requirement}
        if route.scope is Scope.PROJECT and route.api_keys:
            assert names == {"bearer", "api_key"}, route.path
        elif route.scope is not Scope.PUBLIC:
            assert names == {"bearer"}, route.path
    login = document["paths"]["/api/v1/auth/login"]["post"]
    assert login["security"] == []


async def test_operation_ids_are_short_unique_and_stable(client: httpx.AsyncClient) -> None:
    document = await served(client)
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids)) == len(ALL_ROUTES)
    assert all(re.fullmatch(r"[a-z][a-z0-9_]{2,47}", i) for i in ids), ids
    for route in ALL_ROUTES:
        assert operation(document, route)["operationId"] == route.op_id
        if route.key in STABLE_IDS:
            assert route.op_id == STABLE_IDS[route.key], route.key


def test_derived_operation_ids_follow_the_path() -> None:
    assert derived_operation_id("GET", "/projects/{project_id}/queues") == "queues_list"
    assert derived_operation_id("POST", "/projects/{project_id}/queues") == "queues_create"
    assert derived_operation_id("PATCH", "/projects/{project_id}/queues/{queue_id}") == (
        "queues_update"
    )
    assert derived_operation_id("POST", "/projects/{project_id}/queues/{queue_id}/pause") == (
        "queues_pause"
    )
    assert derived_operation_id("GET", "/orgs/{org_id}") == "orgs_get"
    assert derived_operation_id("POST", "/orgs/{org_id}/invitations") == "invitations_create"


async def test_metrics_is_documented_as_text_plain(client: httpx.AsyncClient, app: FastAPI) -> None:
    app.state.settings = app.state.settings.model_copy(update={"metrics_public": True})
    document = await served(client)
    scrape = document["paths"]["/metrics"]["get"]["responses"]["200"]
    assert scrape["content"] == {"text/plain": {"schema": {"type": "string"}}}
    response = await client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")


async def test_batch_max_items_is_what_the_server_accepts(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    document = await served(client)
    schema = document["components"]["schemas"]["BatchRequest"]["properties"]["jobs"]
    assert schema["maxItems"] == limits.MAX_API_BATCH_SIZE == ENQUEUE_LIMIT.limit
    url = f"/api/v1/projects/{tenant_a.project_id}/jobs/batch"
    headers = tenant_a.headers(Role.ADMIN)
    queue = await client.post(
        f"/api/v1/projects/{tenant_a.project_id}/queues", headers=headers, json={"name": "default"}
    )
    assert queue.status_code == 201, queue.text
    too_many = await client.post(
        url, headers=headers, json={"jobs": [{"handler": "noop"}] * (schema["maxItems"] + 1)}
    )
    assert too_many.status_code == 422
    assert too_many.json()["error"]["details"]["fields"][0]["field"] == "jobs"
    full = await client.post(
        url, headers=headers, json={"jobs": [{"handler": "noop"}] * schema["maxItems"]}
    )
    assert full.status_code == 202, full.text


def test_routes_that_count_enqueues_say_so() -> None:
    """A handler calling enforce_enqueue_limit answers 429: its Route must document it."""
    for route in ALL_ROUTES:
        counts = "enforce_enqueue_limit" in inspect.getsource(route.handler)
        assert counts == (route.rate_limit == "enqueue"), f"{route.method} {route.full_path}"


def _documented_operation_ids() -> dict[str, set[str]]:
    """docs/API.md's operationId table: tag → the ids its row lists."""
    text = (Path(__file__).parents[2] / "docs" / "API.md").read_text()
    table = text[text.index("| tag | operationIds |") :].split("\n\n", 1)[0]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    return {tag.strip(): set(re.findall(r"`([a-z0-9_]+)`", ids)) for tag, ids in rows}


async def test_the_operation_id_table_in_api_md_is_the_served_one(
    client: httpx.AsyncClient,
) -> None:
    """A route added (or renamed) without its row in docs/API.md fails here, naming it."""
    document = await served(client)
    served_ids: dict[str, set[str]] = {}
    for item in document["paths"].values():
        for op in item.values():
            served_ids.setdefault(op["tags"][0], set()).add(op["operationId"])
    documented = _documented_operation_ids()
    flat_documented = {i for ids in documented.values() for i in ids}
    flat_served = {i for ids in served_ids.values() for i in ids}
    assert flat_documented - flat_served == set(), "documented but not served"
    assert flat_served - flat_documented == set(), "served but not documented"
    assert documented == served_ids  # and each under its tag
