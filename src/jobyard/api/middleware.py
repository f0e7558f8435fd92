"""Request ids and the last line of defence against stack traces.

Every request gets an `X-Request-Id`: a sane incoming one is kept (so a proxy's id follows the
request through), anything else is replaced by a fresh one. It is bound into structlog's
contextvars, so every log line written while handling the request carries it, and it is set on
every response, including errors. An exception nothing else handled becomes the 500 envelope
here instead of reaching the server's default handler.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Final

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobyard.api.errors import unhandled_error
from jobyard.logs import bound_context, get_logger

log = get_logger("jobyard.api.access")

HEADER: Final = "x-request-id"
# Printable token characters only: an id is echoed into headers and logs, so no spaces,
# quotes or control characters, and a bounded length.
_SANE: Final = re.compile(r"^[A-Za-z0-9._:@/+=-]{8,128}$")


def choose_request_id(incoming: str | None) -> str:
    if incoming is not None and _SANE.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = None
        for name, value in scope.get("headers", []):
            if name == HEADER.encode():
                incoming = value.decode("latin-1")
                break
        request_id = choose_request_id(incoming)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                response_started = True
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k != HEADER.encode()]
                headers.append((HEADER.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        with bound_context(request_id=request_id):
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as exc:
                if response_started:
                    raise
                response = await unhandled_error(Request(scope, receive), exc)
                await response(scope, receive, send_with_id)
            finally:
                # Path only: query strings can carry cursors and filters, never worth logging.
                log.info(
                    "request",
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    duration_ms=round((time.perf_counter() - started) * 1000, 1),
                )
