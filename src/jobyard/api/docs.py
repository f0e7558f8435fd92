"""Swagger UI at /api/v1/docs from assets shipped in a Python package (fastapi-offline's copy of
swagger-ui-dist 5), so the docs render with no internet connection and no CDN.

The page carries a CSP that admits only this origin's files plus the one inline start-up script
FastAPI writes, by its SHA-256 (computed from the page itself, so it follows FastAPI's text).
Swagger UI sets styles through the DOM (allowed) and draws some icons as data: images.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from jobyard.api.routes import API_PREFIX

DOCS_PATH = f"{API_PREFIX}/docs"
ASSETS_PATH = f"{DOCS_PATH}/assets"
OPENAPI_PATH = f"{API_PREFIX}/openapi.json"


def assets_dir() -> Path:
    return Path(str(resources.files("fastapi_offline") / "static"))


_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def docs_csp(html: str) -> str:
    """The docs page's policy: own files only, plus each inline script of `html` by its hash."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in _INLINE_SCRIPT.findall(html)
    )
    return (
        f"default-src 'none'; script-src 'self' {hashes}; style-src 'self'; "
        "img-src 'self' data:; connect-src 'self'; font-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    )


def mount_docs(app: FastAPI) -> None:
    async def swagger_ui() -> HTMLResponse:
        page = _page()
        page.headers["Content-Security-Policy"] = docs_csp(bytes(page.body).decode())
        return page

    def _page() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=OPENAPI_PATH,
            title="jobyard API",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
            # validatorUrl None: never ask validator.swagger.io (offline; the CSP forbids it).
            swagger_ui_parameters={"persistAuthorization": True, "validatorUrl": None},
        )

    app.add_api_route(DOCS_PATH, swagger_ui, methods=["GET"], include_in_schema=False)
    app.mount(ASSETS_PATH, StaticFiles(directory=assets_dir()), name="docs-assets")
