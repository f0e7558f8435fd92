"""The API's rate limits (the counting itself is core/ratelimit.py, in PostgreSQL).

- Auth routes (login, refresh): 5 attempts / 15 min / client IP per route, via `Route.rate_limit`.
- Enqueue: 1000 jobs / min / project. The jobs resource calls `enforce_enqueue_limit(conn,
  project_id, n)` with the number of jobs it is about to enqueue (a batch counts each job).

A refused request raises RateLimited → 429 with `Retry-After` (seconds) and the error envelope.
The client IP is the socket peer; behind a proxy, run uvicorn with --proxy-headers and
--forwarded-allow-ips so it is the real client's.
"""

from __future__ import annotations

from fastapi import Request

from jobyard.core.ratelimit import AUTH_LIMIT, ENQUEUE_LIMIT, take
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId


def client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


async def enforce_auth_limit(conn: Conn, request: Request) -> None:
    route = request.url.path.rstrip("/").rsplit("/", 1)[-1]
    await take(conn, AUTH_LIMIT, f"{route}:{client_ip(request)}")


async def enforce_enqueue_limit(conn: Conn, project_id: ProjectId, n: int = 1) -> None:
    """Count `n` enqueues against the project's per-minute budget, or raise RateLimited."""
    await take(conn, ENQUEUE_LIMIT, str(project_id), n)
