"""Run the API under uvicorn (`jobyard api`). uvicorn handles SIGTERM/SIGINT: it stops
accepting, finishes in-flight requests, runs the lifespan shutdown (closing the pool), exits 0."""

from __future__ import annotations

import uvicorn

from jobyard.api.app import create_app
from jobyard.domain.settings import Settings


def run_api(settings: Settings, *, host: str, port: int) -> None:
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_config=None,  # keep jobyard's structlog JSON handler on the root logger
        access_log=False,  # the request-id middleware logs each request (path only)
        server_header=False,
        lifespan="on",
    )
    uvicorn.Server(config).run()
