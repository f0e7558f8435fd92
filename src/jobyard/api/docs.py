"""Swagger UI at /api/v1/docs from assets shipped in a Python package (fastapi-offline's copy of
swagger-ui-dist 5), so the docs render with no internet connection and no CDN."""

from __future__ import annotations

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


def mount_docs(app: FastAPI) -> None:
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=OPENAPI_PATH,
            title="jobyard API",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )

    app.add_api_route(DOCS_PATH, swagger_ui, methods=["GET"], include_in_schema=False)
    app.mount(ASSETS_PATH, StaticFiles(directory=assets_dir()), name="docs-assets")
