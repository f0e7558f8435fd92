"""The API application factory. Settings are passed in (never a module global); the pool is
opened by the lifespan, or given by the caller (tests, an embedding process)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI

from jobyard.api.body_limit import BodyLimitMiddleware
from jobyard.api.delivery import Deliver, load_delivery
from jobyard.api.docs import OPENAPI_PATH, mount_docs
from jobyard.api.errors import install_error_handlers
from jobyard.api.headers import SecurityHeadersMiddleware
from jobyard.api.health import mount_health
from jobyard.api.middleware import RequestIdMiddleware
from jobyard.api.routes import all_routes, mount_routes
from jobyard.api.secret import resolve_secret_key
from jobyard.core.auth import SigningKeys
from jobyard.db import migrate
from jobyard.db.pool import Pool, open_pool, resolve_database_url
from jobyard.domain.settings import Settings
from jobyard.logs import get_logger

log = get_logger("jobyard.api")

DESCRIPTION = """\
REST API of jobyard, a job scheduler on PostgreSQL. Authenticate with `POST /api/v1/auth/login`
and send `Authorization: Bearer <access_token>`, or use a project API key
(`Authorization: Bearer jy_…` or `X-API-Key: jy_…`). Errors are always
`{"error": {"code", "message", "details", "request_id"}}`; lists are cursor-paginated.
"""


def create_app(
    settings: Settings, *, pool: Pool | None = None, deliver: Deliver | None = None
) -> FastAPI:
    """The FastAPI app. With `pool=None` the lifespan opens (and closes) one for the configured
    database; a given pool is used as is and left open. `deliver` sends invitation links
    (default: JOBYARD_INVITATION_DELIVERY, a log line unless configured)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned: Pool | None = None
        if app.state.pool is None:
            url = await anyio.to_thread.run_sync(resolve_database_url, settings)
            owned = await open_pool(
                url,
                min_size=settings.pool_min_size,
                max_size=settings.pool_max_size,
                name="jobyard-api",
            )
            app.state.pool = owned
        log.info("api started")
        try:
            yield
        finally:
            # Resources the dashboard opened on demand (its one LISTEN connection).
            for close in getattr(app.state, "closers", []):
                await close()
            if owned is not None:
                app.state.pool = None
                await owned.close()

    app = FastAPI(
        title="jobyard",
        version="1",
        description=DESCRIPTION,
        openapi_url=OPENAPI_PATH,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.keys = SigningKeys.derive(resolve_secret_key(settings))
    app.state.pool = pool
    app.state.deliver = deliver or load_delivery(settings)
    app.state.schema_head = migrate.head_revision()
    install_error_handlers(app)
    # Inside RequestIdMiddleware (added after it, so outer), whose id the 413 carries.
    app.add_middleware(BodyLimitMiddleware)
    app.add_middleware(RequestIdMiddleware)
    # Added last, so outermost: even the 500 envelope of RequestIdMiddleware gets the headers.
    app.add_middleware(SecurityHeadersMiddleware)
    mount_routes(app, all_routes())
    mount_health(app)
    mount_docs(app)
    # The dashboard sits above the API (web imports api); the API process serves it at `/`.
    from jobyard.web import mount_dashboard

    mount_dashboard(app)
    return app
