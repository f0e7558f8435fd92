"""Security headers on every response (API, dashboard, docs, errors, static files).

- `X-Content-Type-Options: nosniff`: a JSON or text body is never sniffed into HTML or script.
- `Referrer-Policy: same-origin`: a URL never leaks to another site through Referer (an
  invitation link carries its token in the query string).
- Framing protection twice: `X-Frame-Options: DENY` for old browsers and CSP
  `frame-ancestors 'none'` for current ones. A response that sets its own CSP (the dashboard's
  pages, the API docs) keeps it; each of those includes `frame-ancestors 'none'` itself.
"""

from __future__ import annotations

from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADERS: Final = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
)
_CSP: Final = b"content-security-policy"
DEFAULT_CSP: Final = b"frame-ancestors 'none'"


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers.extend((k, v) for k, v in HEADERS if k not in present)
                if _CSP not in present:
                    headers.append((_CSP, DEFAULT_CSP))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
