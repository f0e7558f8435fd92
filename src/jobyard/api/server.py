"""Run the API under uvicorn (`jobyard api`). uvicorn handles SIGTERM/SIGINT: it stops
accepting, finishes in-flight requests, runs the lifespan shutdown (closing the pool), exits 0."""

from __future__ import annotations

import signal
from types import FrameType

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
        # uvicorn believes X-Forwarded-For from 127.0.0.1 by default, so any local client could
        # name a fresh IP per login attempt. Off unless the operator names the proxies to trust.
        proxy_headers=settings.forwarded_allow_ips is not None,
        forwarded_allow_ips=settings.forwarded_allow_ips or "",
    )
    # uvicorn restores the handlers it found and re-raises the signal that stopped it, so the
    # process would die "by the signal" (or, for SIGINT, with a KeyboardInterrupt traceback)
    # after a clean shutdown. Handlers of our own are what it restores: the re-raise is a
    # no-op and a drained API exits 0, as the worker and the scheduler do.
    previous = {sig: signal.signal(sig, _after_shutdown) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.Server(config).run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _after_shutdown(_signum: int, _frame: FrameType | None) -> None:
    """The signal uvicorn re-raises once it has shut down: nothing is left to do."""
