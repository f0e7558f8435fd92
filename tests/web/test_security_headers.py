"""Issue 12 (headers and exposure): nosniff, Referrer-Policy and framing protection on every
response, and a CSP on /api/v1/docs under which Swagger UI still works (checked in Chromium)."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import ConsoleMessage, Page, expect

from tests.web.conftest import screenshot_path

API = "/api/v1"
# One of each kind of response: JSON, an error envelope, a page, a static file, the docs.
PATHS = [
    "/healthz",
    f"{API}/auth/me",
    f"{API}/no-such-route",
    "/login",
    "/static/app.css",
    f"{API}/docs",
    f"{API}/docs/assets/swagger-ui.css",
    f"{API}/openapi.json",
    "/metrics",
]


@pytest.mark.parametrize("path", PATHS)
async def test_every_response_carries_the_security_headers(
    client: httpx.AsyncClient, path: str
) -> None:
    response = await client.get(path)
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    assert response.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


async def test_the_docs_page_has_a_csp_without_unsafe_inline(client: httpx.AsyncClient) -> None:
    csp = (await client.get(f"{API}/docs")).headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "'sha256-" in csp  # the one inline start-up script, by its hash


@pytest.mark.browser
async def test_swagger_ui_works_under_its_csp_in_chromium(page: Page) -> None:
    violations: list[str] = []

    def on_console(msg: ConsoleMessage) -> None:
        if "Content Security Policy" in msg.text or msg.type == "error":
            violations.append(msg.text)

    page.on("console", on_console)
    response = await page.goto(f"{API}/docs")
    assert response is not None and "default-src" in response.headers["content-security-policy"]
    # Operations render only if the bundle ran, the inline init ran and the spec was fetched.
    await expect(page.locator(".opblock").first).to_be_visible(timeout=30_000)
    await page.locator(".opblock-summary").first.click()
    await expect(page.locator(".opblock-body").first).to_be_visible()
    await page.screenshot(path=screenshot_path("api-docs.png"))
    assert violations == []
