"""Conventions every response follows: the error envelope, X-Request-Id, no stack traces,
503 when the database is gone, separate health and readiness, docs that work offline."""

from __future__ import annotations

import logging
import re

import httpx
import pytest
from fastapi import FastAPI

from jobyard.api.app import create_app
from jobyard.api.middleware import choose_request_id
from jobyard.db.pool import Pool
from jobyard.domain.enums import Role
from jobyard.domain.errors import Conflict, IllegalTransition
from jobyard.domain.settings import Settings
from tests.api.conftest import Tenant
from tests.api.test_isolation import assert_envelope

API = "/api/v1"


async def test_a_sane_request_id_is_echoed_and_anything_else_replaced(
    client: httpx.AsyncClient,
) -> None:
    kept = await client.get("/healthz", headers={"X-Request-Id": "trace-1234-abcd"})
    assert kept.headers["x-request-id"] == "trace-1234-abcd"
    for bad in ("short", "has spaces in it", "x" * 129, 'quote"inside-id', "semi;colon;id;1"):
        response = await client.get("/healthz", headers={"X-Request-Id": bad})
        assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-request-id"]), bad
    latin = await client.get(
        "/healthz", headers={"X-Request-Id": "caf\xe9-request-id".encode("latin-1")}
    )
    assert re.fullmatch(r"[0-9a-f]{32}", latin.headers["x-request-id"])
    generated = await client.get("/healthz")
    assert re.fullmatch(r"[0-9a-f]{32}", generated.headers["x-request-id"])
    assert choose_request_id(None) != choose_request_id(None)


async def test_framework_errors_use_the_envelope_too(client: httpx.AsyncClient) -> None:
    unknown = await client.get(f"{API}/nope", headers={"X-Request-Id": "req-unknown-route"})
    err = assert_envelope(unknown, 404, "not_found")
    assert err["request_id"] == "req-unknown-route"
    assert_envelope(await client.put(f"{API}/auth/login"), 405, "method_not_allowed")
    broken = await client.post(
        f"{API}/auth/login", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    err = assert_envelope(broken, 400, "bad_request")
    assert err["message"].startswith("the body is not valid JSON: ")


async def test_validation_errors_list_every_bad_field_by_name(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    response = await client.post(
        f"{API}/orgs", headers=tenant_a.headers(), json={"name": "", "slug": "Bad Slug", "x": 1}
    )
    err = assert_envelope(response, 422, "validation_error")
    assert sorted(f["field"] for f in err["details"]["fields"]) == ["name", "slug", "x"]
    response = await client.get(
        f"{API}/orgs/{tenant_a.org_id}/members", headers=tenant_a.headers(), params={"limit": 0}
    )
    err = assert_envelope(response, 422, "validation_error")
    assert err["details"]["fields"][0]["field"] == "query.limit"


@pytest.fixture
def failing_app(api_settings: Settings, api_pool: Pool) -> FastAPI:
    """A private app instance with extra routes that fail on purpose (not the product's app)."""
    app = create_app(api_settings, pool=api_pool)

    async def boom() -> None:
        secret = "do-not-leak-this-local"
        raise RuntimeError(f"kaboom {secret}")

    async def conflict() -> None:
        raise Conflict("already there", field="name")

    async def illegal() -> None:
        raise IllegalTransition()

    app.add_api_route("/boom", boom)
    app.add_api_route("/conflict", conflict)
    app.add_api_route("/illegal", illegal)
    return app


async def test_unhandled_errors_are_500_with_a_request_id_and_no_trace(
    failing_app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    transport = httpx.ASGITransport(app=failing_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        with caplog.at_level(logging.ERROR, logger="jobyard.api"):
            response = await client.get("/boom", headers={"X-Request-Id": "req-boom-0001"})
        err = assert_envelope(response, 500, "internal_error")
        assert err["request_id"] == "req-boom-0001"
        assert "kaboom" not in response.text and "Traceback" not in response.text
        assert any("unhandled error" in r.getMessage() for r in caplog.records)
        # The log has the type and frames, but not the message (it may quote data).
        assert "RuntimeError" in caplog.text and "test_conventions.py" in caplog.text
        assert "kaboom" not in caplog.text
        assert_envelope(await client.get("/conflict"), 409, "conflict")
        assert_envelope(await client.get("/illegal"), 409, "illegal_transition")


async def test_a_lost_database_is_503_not_a_crash(
    app: FastAPI, api_pool: Pool, tenant_a: Tenant
) -> None:
    await api_pool.close()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/api/v1/auth/me", headers=tenant_a.headers(Role.VIEWER))
        assert_envelope(response, 503, "database_unavailable")
        ready = await client.get("/readyz")
        assert_envelope(ready, 503, "not_ready")
        assert (await client.get("/healthz")).json() == {"status": "ok"}


async def test_readyz_checks_the_database_and_the_migration_head(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "migrations": "at head"}
    app.state.schema_head = "9999"  # as if this code expected a newer migration
    behind = await client.get("/readyz")
    err = assert_envelope(behind, 503, "not_ready")
    assert err["details"]["checks"]["migrations"].endswith("expected 9999")


async def test_swagger_ui_is_served_from_local_assets(client: httpx.AsyncClient) -> None:
    page = await client.get(f"{API}/docs")
    assert page.status_code == 200
    urls = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert urls and all(u.startswith(f"{API}/docs/assets/") for u in urls), urls
    assert "cdn" not in page.text.lower()
    for url in urls:
        asset = await client.get(url)
        assert asset.status_code == 200 and len(asset.content) > 1000, url
    bundle = await client.get(f"{API}/docs/assets/swagger-ui-bundle.js")
    # Swagger UI 5 renders OpenAPI 3.1 (what FastAPI generates); 4.x would not.
    assert re.search(rb'"5\.\d+\.\d+"', bundle.content)
    spec = (await client.get(f"{API}/openapi.json")).json()
    assert spec["openapi"].startswith("3.1")
    login = spec["paths"][f"{API}/auth/login"]["post"]
    assert login["x-scope"] == "public"
    assert "429" in login["responses"] and "422" in login["responses"]
    schemes = spec["components"]["securitySchemes"]
    assert {"bearer", "api_key"} <= set(schemes)


async def test_nul_and_control_characters_are_422_naming_the_field(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    """PostgreSQL text cannot hold NUL: it must be refused by validation, never reach the SQL."""
    owner = tenant_a.headers()
    calls = [
        ("POST", f"{API}/auth/login", {"email": "a\x00b@example.test", "password": "x"}, "email"),
        (
            "POST",
            f"{API}/orgs/{tenant_a.org_id}/invitations",
            {"email": "n\x00@example.test"},
            "email",
        ),
        (
            "POST",
            f"{API}/invitations/redeem",
            {"token": "jyi_x", "password": "long-enough-password", "display_name": "bad\x00name"},
            "display_name",
        ),
        ("POST", f"{API}/orgs", {"name": "tab\tname", "slug": "ok"}, "name"),
        ("POST", f"{API}/projects/{tenant_a.project_id}/api-keys", {"name": "k\x00"}, "name"),
    ]
    for method, path, body, field in calls:
        response = await client.request(method, path, json=body, headers=owner)
        err = assert_envelope(response, 422, "validation_error")
        assert [f["field"] for f in err["details"]["fields"]] == [field], response.text
