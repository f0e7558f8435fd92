"""What a handler receives: the job's identity, its payload, a fenced logger, a cancel signal.

The same `JobContext` serves async handlers (running on the event loop) and plain `def`
handlers (running in a worker thread). The logger and the cancel check work from both.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any

from jobyard.domain import limits
from jobyard.domain.errors import ConfigurationError, ValidationFailed
from jobyard.domain.models import ClaimedJob

# Writes one job_logs line (fenced); raises LeaseLost when the run is no longer held.
LogWriter = Callable[[ClaimedJob, str, str, dict[str, Any]], Awaitable[None]]
# Records the run's progress (fenced); raises LeaseLost when the run is no longer held.
ProgressWriter = Callable[[ClaimedJob, float, str | None], Awaitable[None]]
# Reads the results of a job's parents, by parent job id.
ParentsReader = Callable[[int], Awaitable[dict[int, Any]]]

_LEVELS = ("debug", "info", "warning", "error")


class _Written:
    """Returned by a logger call made from a worker thread: the line is already written, so
    awaiting it (or not) is harmless."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # pragma: no cover - makes this a generator


_WRITTEN = _Written()


class JobLogger:
    """`info/warning/error/debug(message, **fields)` → one `job_logs` row for this run.

    In an `async def` handler, await the call: `await ctx.logger.info("sent", count=3)`.
    In a plain `def` handler, just call it: `ctx.logger.info("sent", count=3)` blocks until
    the line is written. Either way a lost lease raises `LeaseLost`, so a stale run stops
    writing history for a job another worker now owns.
    """

    def __init__(self, job: ClaimedJob, write: LogWriter, loop: asyncio.AbstractEventLoop) -> None:
        self._job = job
        self._write = write
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def debug(self, message: str, **fields: Any) -> Awaitable[None]:
        return self._emit("debug", message, fields)

    def info(self, message: str, **fields: Any) -> Awaitable[None]:
        return self._emit("info", message, fields)

    def warning(self, message: str, **fields: Any) -> Awaitable[None]:
        return self._emit("warning", message, fields)

    def error(self, message: str, **fields: Any) -> Awaitable[None]:
        return self._emit("error", message, fields)

    def _emit(self, level: str, message: str, fields: dict[str, Any]) -> Awaitable[None]:
        assert level in _LEVELS
        return self._on_loop(self._written(level, str(message), fields))

    def _on_loop(self, coro: Coroutine[Any, Any, None]) -> Awaitable[None]:
        """Await `coro` in an async handler; run it to the end from a thread handler."""
        if threading.get_ident() == self._loop_thread:
            return coro
        # A thread handler: hand the write to the loop and wait for it here.
        asyncio.run_coroutine_threadsafe(coro, self._loop).result()
        return _WRITTEN

    async def _written(self, level: str, message: str, fields: dict[str, Any]) -> None:
        await self._write(self._job, level, message, fields)


@dataclass
class JobContext:
    """Everything a handler may need about the run it is executing.

    `attempt` counts toward `max_attempts` (refunded when infrastructure, not the handler, ended
    a run); `execution_seq` is unique per physical run — use it (with `job_id`) to deduplicate
    side effects, since delivery is at-least-once.
    """

    job_id: int
    attempt: int
    execution_seq: int
    max_attempts: int
    payload: Any
    queue: str
    handler: str
    logger: JobLogger
    # Set when the handler should stop: timeout, cancel request, lost lease, or drain expiry.
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    # Reads parents' results on demand: a job without parents never pays for the query.
    parents_reader: ParentsReader | None = field(default=None, repr=False)
    # A plain bool, not a threading.Event: written once on the loop thread, read from handler
    # threads (one attribute store is atomic); an Event per job cost ~3 µs of a no-op's budget.
    _cancelled_flag: bool = field(default=False, repr=False)
    # Set by the worker that runs the job; None for a context built by hand (a unit test).
    _progress: ProgressWriter | None = field(default=None, repr=False)

    def progress(self, fraction: float, message: str | None = None) -> Awaitable[None]:
        """Record how far the job is: `fraction` from 0 to 1 and an optional short message.

        Shown on the job's API resource and dashboard page. Like the logger: await it in an
        `async def` handler, just call it in a plain `def` one; a lost lease raises LeaseLost.
        """
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, int | float)
            or not math.isfinite(fraction)
            or not 0 <= fraction <= 1
        ):
            raise ValidationFailed(
                f"progress must be a number from 0 to 1, got {fraction!r}", field="fraction"
            )
        if message is not None:
            message = str(message)
            if len(message) > limits.MAX_PROGRESS_MESSAGE_LENGTH:
                # Cut, as a log line is: a long status text must not fail a job doing its work.
                message = message[: limits.MAX_PROGRESS_MESSAGE_LENGTH - 1] + "…"
        if self._progress is None:
            raise ConfigurationError("progress is recorded only for a job run by a worker")
        job = self.logger._job
        return self.logger._on_loop(_awaited(self._progress(job, float(fraction), message)))

    async def parent_results(self) -> dict[int, Any]:
        """The results of the jobs this one ran after, by parent job id, in id order (None
        for a parent that did not end done, which only a `run_anyway` job can see)."""
        if self.parents_reader is None:
            return {}
        return await self.parents_reader(self.job_id)

    def parent_results_sync(self) -> dict[int, Any]:
        """`parent_results` for a plain `def` handler (runs in a worker thread)."""
        return asyncio.run_coroutine_threadsafe(self.parent_results(), self.logger._loop).result()

    def is_cancelled(self) -> bool:
        """Thread-safe: poll this from a plain `def` handler between units of work."""
        return self._cancelled_flag

    def raise_if_cancelled(self) -> None:
        """Convenience for thread handlers: stop with CancelledError once asked to."""
        if self.is_cancelled():
            raise asyncio.CancelledError

    def _signal_cancel(self) -> None:
        # Called on the event loop thread by the runtime.
        self._cancelled_flag = True
        self.cancelled.set()


async def _awaited(write: Awaitable[None]) -> None:
    await write
