"""The API's rate limits (the counting itself is core/ratelimit.py, in PostgreSQL).

- Login: 5 failed attempts / 15 min per account AND client IP (and 100 per IP alone), counted
  before the password is checked; a successful login gives its attempt back. The login handlers
  (API and dashboard) call `take_login_attempt` and, on success, `forgive_login_attempt`.
- Refresh: 5 attempts / 15 min / client IP, via `Route.rate_limit = "auth"`.
- Enqueue: 1000 jobs / min / project. The jobs resource calls `enforce_enqueue_limit(conn,
  project_id, n)` with the number of jobs it is about to enqueue (a batch counts each job).

A refused request raises RateLimited → 429 with `Retry-After` (seconds) and the error envelope.
The client IP is the socket peer. Proxy headers (X-Forwarded-For) are believed only from the
addresses in JOBYARD_FORWARDED_ALLOW_IPS (see api/server.py); otherwise any client could name
a fresh IP per attempt.
"""

from __future__ import annotations

from fastapi import Request

from jobyard.core.ratelimit import (
    AUTH_LIMIT,
    ENQUEUE_LIMIT,
    LOGIN_IP_LIMIT,
    LOGIN_LIMIT,
    RateLimited,
    give_back,
    take,
)
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId


def client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


async def enforce_auth_limit(conn: Conn, request: Request) -> None:
    route = request.url.path.rstrip("/").rsplit("/", 1)[-1]
    await take(conn, AUTH_LIMIT, f"{route}:{client_ip(request)}")


def _login_keys(request: Request, email: str) -> tuple[str, str]:
    ip = client_ip(request)
    return f"{email.strip().lower()[:320]}|{ip}", ip


async def take_login_attempt(conn: Conn, request: Request, email: str) -> None:
    """Count a login attempt for (account, IP) and for the IP, or raise RateLimited."""
    pair, ip = _login_keys(request, email)
    await take(conn, LOGIN_LIMIT, pair)
    try:
        await take(conn, LOGIN_IP_LIMIT, ip)
    except RateLimited:
        await give_back(conn, LOGIN_LIMIT, pair)
        raise


async def forgive_login_attempt(conn: Conn, request: Request, email: str) -> None:
    """The attempt succeeded: it is not a failure, so both budgets get it back."""
    pair, ip = _login_keys(request, email)
    await give_back(conn, LOGIN_LIMIT, pair)
    await give_back(conn, LOGIN_IP_LIMIT, ip)


async def enforce_enqueue_limit(conn: Conn, project_id: ProjectId, n: int = 1) -> None:
    """Count `n` enqueues against the project's per-minute budget, or raise RateLimited."""
    await take(conn, ENQUEUE_LIMIT, str(project_id), n)
