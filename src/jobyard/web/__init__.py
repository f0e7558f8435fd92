"""The operator dashboard: Jinja pages served by the API process at `/`."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

STATIC_DIR = Path(__file__).parent / "static"
# Paths that answer JSON (or plain text) when unknown: everything else is a dashboard path.
NOT_DASHBOARD = ("/api/", "/metrics", "/healthz", "/readyz", "/static/")


def dashboard_routers() -> list[APIRouter]:
    """Every dashboard module's router: pages, operator actions, invitations, workflows, live
    streams, statistics, worker pages."""
    # Imported here: the page modules import the api package.
    from jobyard.web import charts, console, invitations, live, pages, workers, workflows

    return [
        pages.router,
        console.router,
        invitations.router,
        workflows.router,
        live.router,
        charts.router,
        workers.router,
    ]


def mount_dashboard(app: FastAPI) -> None:
    """Add the dashboard's page routes and its static files (CSS, the polling script), and
    answer an unknown dashboard path with the HTML 404 page rather than the API's JSON."""
    # Route by route (not include_router), so app.routes lists each page as a plain route.
    for route in [r for router in dashboard_routers() for r in router.routes]:
        assert isinstance(route, APIRoute)
        app.add_api_route(
            route.path,
            route.endpoint,
            methods=sorted(route.methods or ()),
            include_in_schema=False,
            name=route.name,
        )
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    api_handler = app.exception_handlers[StarletteHTTPException]

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        path = request.url.path
        if exc.status_code in (404, 405) and not path.startswith(NOT_DASHBOARD):
            from jobyard.web.pages import render

            message = "There is no page at this address."
            return render("error.html", 404, status=404, message=message, user=None)
        response: Response = await api_handler(request, exc)  # type: ignore[misc]
        return response

    app.add_exception_handler(StarletteHTTPException, not_found)
