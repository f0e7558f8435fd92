"""Riding out database outages: which errors mean "reconnect and retry", and how long to wait."""

from __future__ import annotations

import asyncio
from typing import Final

from jobyard.db.pool import CONNECTION_ERRORS
from jobyard.domain.errors import DatabaseUnavailable
from jobyard.logs import get_logger

# Driver connection errors, and the domain error core raises for them inside `translated()`.
RETRYABLE: Final[tuple[type[BaseException], ...]] = (*CONNECTION_ERRORS, DatabaseUnavailable)
FIRST_DELAY_S: Final = 0.5
MAX_DELAY_S: Final = 5.0

log = get_logger("jobyard.worker")


class Backoff:
    """0.5 s, doubling to 5 s; reset after the first success."""

    def __init__(self, what: str, first_s: float = FIRST_DELAY_S, cap_s: float = MAX_DELAY_S):
        self.what = what
        self.first_s = first_s
        self.cap_s = cap_s
        self.delay_s = first_s
        self.failures = 0

    async def wait(self, exc: BaseException) -> None:
        self.failures += 1
        log.warning(
            "database unavailable, retrying",
            op=self.what,
            error=type(exc).__name__,
            retry_in_s=self.delay_s,
            failures=self.failures,
        )
        await asyncio.sleep(self.delay_s)
        self.delay_s = min(self.cap_s, self.delay_s * 2)

    def reset(self) -> None:
        if self.failures:
            log.info("database reachable again", op=self.what, failures=self.failures)
        self.delay_s = self.first_s
        self.failures = 0
