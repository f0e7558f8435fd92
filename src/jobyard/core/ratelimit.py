"""Rate limits kept in PostgreSQL, so every API replica counts against the same budget.

Fixed windows: one atomic `INSERT … ON CONFLICT DO UPDATE SET hits = hits + n` per check, which
takes the hits only if they fit. A refused request takes nothing, and Retry-After is exactly the
time until the window ends. The price of fixed windows is a burst of up to 2 × limit around a
window boundary; for 5 login attempts per 15 minutes that is still 10, far below guessing range.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain import limits
from jobyard.domain.errors import JobyardError, ValidationFailed


@dataclass(frozen=True)
class Limit:
    name: str
    limit: int
    window_s: int


AUTH_LIMIT: Final = Limit("auth", 5, 15 * 60)  # per client IP, per auth route (refresh)
# Failed logins (OWASP): per account AND client IP, so one person's mistakes (or an attacker's
# guesses from elsewhere) never lock the account out everywhere; plus a looser budget per IP
# alone against spraying many accounts. A successful login gives its hits back.
LOGIN_LIMIT: Final = Limit("login", 5, 15 * 60)
LOGIN_IP_LIMIT: Final = Limit("login-ip", 100, 15 * 60)
# per project; a batch counts each job
ENQUEUE_LIMIT: Final = Limit("enqueue", limits.ENQUEUE_PER_MINUTE, 60)


class RateLimited(JobyardError):
    """Too many requests; retry later."""

    code = "rate_limited"

    def __init__(
        self, message: str | None = None, *, retry_after_s: int, **details: object
    ) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **details)
        self.retry_after_s = retry_after_s


async def take(
    conn: Conn, limit: Limit, key: str, n: int = 1, *, now: datetime | None = None
) -> int:
    """Take `n` hits from `limit` for `key`; return the hits used in this window.

    Raises RateLimited (with retry_after_s) when they do not fit, and ValidationFailed when `n`
    alone exceeds the limit, since no amount of waiting would let that request through.
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    if n > limit.limit:
        raise ValidationFailed(
            f"{n} exceeds the {limit.name} limit of {limit.limit} per {limit.window_s} s",
            field="jobs",
        )
    row = await run.one(
        conn,
        "ratelimit_take",
        {
            "bucket": f"{limit.name}:{key}",
            "n": n,
            "limit": limit.limit,
            "window_s": limit.window_s,
            "now": now,
        },
    )
    assert row is not None
    if row["hits"] is None:
        raise RateLimited(
            f"{limit.name} rate limit of {limit.limit} per {limit.window_s} s exceeded",
            retry_after_s=row["retry_after_s"],
        )
    return int(row["hits"])


async def give_back(
    conn: Conn, limit: Limit, key: str, n: int = 1, *, now: datetime | None = None
) -> None:
    """Return `n` hits taken from `limit` for `key` in the current window (never below 0)."""
    await run.execute(
        conn,
        "ratelimit_give_back",
        {"bucket": f"{limit.name}:{key}", "n": n, "window_s": limit.window_s, "now": now},
    )


async def prune(conn: Conn, *, older_than_s: int = 86400, now: datetime | None = None) -> int:
    """Delete expired counters (for the retention loop); returns how many."""
    return await run.execute(conn, "ratelimit_prune", {"older_than_s": older_than_s, "now": now})
