"""The operator dashboard: Jinja pages served by the API process at `/`."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"


def dashboard_routers() -> list[APIRouter]:
    """Every dashboard module's router: pages, live streams, statistics, worker pages."""
    # Imported here: the page modules import the api package.
    from jobyard.web import charts, live, pages, workers

    return [pages.router, live.router, charts.router, workers.router]


def mount_dashboard(app: FastAPI) -> None:
    """Add the dashboard's page routes and its static files (CSS, the polling script)."""
    # Route by route (not include_router), so app.routes lists each page as a plain route.
    for router in dashboard_routers():
        for route in router.routes:
            assert isinstance(route, APIRoute)
            app.add_api_route(
                route.path,
                route.endpoint,
                methods=sorted(route.methods or ()),
                include_in_schema=False,
                name=route.name,
            )
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
