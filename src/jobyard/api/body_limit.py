"""Request bodies are bounded before anything reads them: 413 in the error envelope.

Without a bound, a 200 MB body sent to the unauthenticated login route was read and parsed
whole (1.5 s, 1.1 GB resident) before the validation refused it. The largest body a client
needs is a batch or workflow of 1,000 items of 64 KB payloads each; every other route takes
one payload at most. A declared `Content-Length` over the route's bound is refused before
the body is read; a body sent without one (chunked) is counted as it arrives and refused once
it passes the bound, before the application sees any of it.
"""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobyard.api.errors import envelope, request_id_of
from jobyard.domain.limits import MAX_API_BATCH_SIZE, MAX_PAYLOAD_BYTES

# One payload with its job's other fields (and a form's URL encoding of it), with room to spare.
MAX_BODY_BYTES: Final = 1024 * 1024
# A batch or workflow of MAX_API_BATCH_SIZE items, each a payload and its fields.
MAX_MANY_BODY_BYTES: Final = MAX_API_BATCH_SIZE * (MAX_PAYLOAD_BYTES + 4096)
_MANY_SUFFIXES: Final = ("/jobs/batch", "/workflows")


def body_limit_for(path: str) -> int:
    return MAX_MANY_BODY_BYTES if path.rstrip("/").endswith(_MANY_SUFFIXES) else MAX_BODY_BYTES


class _TooLarge(Exception):
    pass


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit_for(scope["path"])
        declared = _content_length(scope)
        if declared is not None:
            # The server holds the body to the declared length, so a length within the bound
            # needs no counting.
            if declared > limit:
                await _refuse(scope, receive, send, limit)
                return
            await self.app(scope, receive, send)
            return
        try:
            body = await _read_up_to(receive, limit)
        except _TooLarge:
            await _refuse(scope, receive, send, limit)
            return
        await self.app(scope, _replay(body, receive), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            # The server refuses a malformed length before the application is called.
            return int(text) if text.isdigit() else None
    return None


async def _read_up_to(receive: Receive, limit: int) -> list[Message]:
    """The request's body messages, or _TooLarge once they pass `limit` bytes."""
    messages: list[Message] = []
    total = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages  # a disconnect: the application sees it as usual
        total += len(message.get("body", b""))
        if total > limit:
            raise _TooLarge
        if not message.get("more_body", False):
            return messages


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """Hand the buffered messages out first, then the connection's own (a disconnect)."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


async def _refuse(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    response = envelope(
        413,
        "payload_too_large",
        f"the request body is larger than this route accepts ({limit:,} bytes)",
        {"limit_bytes": limit},
        request_id=request_id_of(Request(scope)),
        headers={"connection": "close"},
    )
    await response(scope, receive, send)
