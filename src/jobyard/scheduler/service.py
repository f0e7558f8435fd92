"""LoopService: each scheduler loop is a small service with a validated Config and a
`run_once(conn, now)` that returns counts. Tests call `run_once` directly; `run()` only adds the
interval, a little jitter, and error backoff (STYLE rule 6).

No loop needs a leader: every statement it runs locks rows with `FOR UPDATE SKIP LOCKED`, so N
replicas running the same loop split the work instead of repeating it.
"""

from __future__ import annotations

import asyncio
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import ClassVar

from jobyard.db.pool import CONNECTION_ERRORS, Conn
from jobyard.domain.errors import ConfigurationError, DatabaseUnavailable
from jobyard.logs import get_logger

log = get_logger("jobyard.scheduler")

# Errors that mean "the database is away" (the reaper's outage grace keys on these).
UNAVAILABLE: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, DatabaseUnavailable)

ConnectionSource = Callable[[], AbstractAsyncContextManager[Conn]]

# Never sleep less than this between passes (a due time "now" still yields to the event loop).
MIN_SLEEP_S = 0.005
# Error backoff: interval × 2^failures, capped.
MAX_BACKOFF_S = 30.0
JITTER = 0.1


def check_number(name: str, value: object, lo: float, hi: float, *, lo_open: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        assert isinstance(value, int | float)
        ok = (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        bound = f"greater than {lo:g}" if lo_open else f"at least {lo:g}"
        raise ConfigurationError(f"{name}: must be a number {bound} and at most {hi:g}", field=name)


def check_int(name: str, value: object, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ConfigurationError(f"{name}: must be an integer from {lo} to {hi}", field=name)


@dataclass(frozen=True)
class Config:
    """What every loop needs. `batch` bounds each statement; `max_batches` bounds each pass."""

    interval_s: float
    batch: int
    max_batches: int = 100

    def __post_init__(self) -> None:
        check_number("interval_s", self.interval_s, 0, 86_400, lo_open=True)
        check_int("batch", self.batch, 1, 100_000)
        check_int("max_batches", self.max_batches, 1, 100_000)


@dataclass(frozen=True)
class PassResult:
    """What one pass did (`counts`), whether work is left (`more`: go again at once), and an
    optional hint for the next wake-up in seconds (`next_in_s`: e.g. the next cron fire)."""

    counts: Mapping[str, int] = field(default_factory=dict)
    more: bool = False
    next_in_s: float | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class LoopService(ABC):
    """One scheduler loop. Subclasses set `name` and implement `run_once`."""

    name: ClassVar[str]

    def __init__(self, config: Config) -> None:
        self.config = config
        self.passes = 0
        self.failures = 0

    @abstractmethod
    async def run_once(self, conn: Conn, now: datetime | None = None) -> PassResult:
        """One pass on `conn` (autocommit). `now` overrides the database clock in tests."""

    def on_unavailable(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """The database could not be reached this pass (hook; the reaper starts a grace)."""

    def delay_after(self, result: PassResult) -> float:
        """Seconds to sleep after a successful pass."""
        if result.more:
            return 0.0
        delay = self.config.interval_s * (1 + random.uniform(-JITTER, JITTER))
        if result.next_in_s is not None:
            delay = min(delay, result.next_in_s)
        return max(MIN_SLEEP_S, delay)

    def backoff(self) -> float:
        return min(MAX_BACKOFF_S, self.config.interval_s * 2.0 ** min(self.failures, 16))

    async def step(self, connect: ConnectionSource) -> PassResult | None:
        """One pass with error handling: the result, or None when it failed."""
        try:
            async with connect() as conn:
                result = await self.run_once(conn)
        except UNAVAILABLE as exc:
            self.failures += 1
            self.on_unavailable()
            log.warning("database unavailable", loop=self.name, error=type(exc).__name__)
            return None
        except Exception:
            self.failures += 1
            log.exception("loop pass failed", loop=self.name)
            return None
        self.failures = 0
        self.passes += 1
        if result.total:
            log.info("loop pass", loop=self.name, **result.counts)
        return result

    async def run(self, connect: ConnectionSource, stop: asyncio.Event) -> None:
        """Pass, sleep, repeat until `stop` is set; a pass in progress is allowed to finish."""
        log.info("loop started", loop=self.name, interval_s=self.config.interval_s)
        while not stop.is_set():
            result = await self.step(connect)
            delay = self.backoff() if result is None else self.delay_after(result)
            if delay <= 0:
                await asyncio.sleep(0)
                continue
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
        log.info("loop stopped", loop=self.name)


class OutageGrace:
    """One lease of grace after the database comes back (or at start).

    While the database is unreachable no worker can heartbeat, so when it returns every lease
    that expired during the outage looks abandoned — including those of live workers. For
    `window_s` (one lease) measured on the database clock from the first successful pass after
    a failure, the owner holds off; by then a live worker has heartbeated and extended its
    leases, and whatever is still expired really is abandoned.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._recovering = True  # the first pass after start is a pass after a (re)connect
        self._since: datetime | None = None

    def lost(self) -> None:
        """The database was unreachable: the next successful pass starts a new window."""
        self._recovering = True
        self._since = None

    @property
    def active(self) -> bool:
        """Whether a window is open or about to open (the caller then needs the DB's now)."""
        return self._recovering or self._since is not None

    def holding_off(self, db_now: datetime) -> bool:
        if self._recovering:
            self._recovering = False
            self._since = db_now
        if self._since is None:
            return False
        if db_now < self._since + timedelta(seconds=self.window_s):
            return True
        self._since = None
        return False

    @property
    def until(self) -> datetime | None:
        return None if self._since is None else self._since + timedelta(seconds=self.window_s)
