"""Batched completions: successes collected for a few milliseconds, then one statement.

`complete_many` is fenced, so a batch retried after a dropped connection is safe: each job is
completed once, or reported as no longer held (lease lost, or already recorded by the attempt
whose reply the outage swallowed).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from jobyard.core import transitions
from jobyard.db.pool import Pool
from jobyard.domain.models import ClaimedJob
from jobyard.logs import get_logger
from jobyard.worker.retrying import RETRYABLE, Backoff

# 5 ms adds little latency to one job and lets a busy worker finish dozens per statement.
DEFAULT_WINDOW_S: Final = 0.005
DEFAULT_MAX_BATCH: Final = 200

log = get_logger("jobyard.worker")


# Told once per success: True if it landed, False if this worker no longer held the run, or
# the exception that kept it from being recorded. A callback, not a future: one object less
# per job, and the caller has nothing to await.
Landed: TypeAlias = Callable[[bool | Exception], None]


@dataclass(eq=False, slots=True)
class _Pending:
    job: ClaimedJob
    result: Any
    landed: Landed


class Completer:
    def __init__(
        self,
        pool: Pool,
        *,
        handlers_busy: Callable[[], bool],
        window_s: float = DEFAULT_WINDOW_S,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        self._pool = pool
        self._handlers_busy = handlers_busy
        self._window_s = window_s
        self._max_batch = max_batch
        self._items: deque[_Pending] = deque()
        self._ready = asyncio.Event()
        self.statements = 0
        self.completed = 0

    def submit(self, job: ClaimedJob, result: Any, landed: Landed) -> None:
        """Queue a success for the next statement; `landed` hears how it ended."""
        self._items.append(_Pending(job, result, landed))
        self._ready.set()

    async def run(self) -> None:
        """Background loop; cancel it only after every submitted success has heard back."""
        while True:
            await self._ready.wait()
            # Wait a moment only if more successes may be about to arrive.
            if len(self._items) < self._max_batch and self._handlers_busy():
                await asyncio.sleep(self._window_s)
            batch = [self._items.popleft() for _ in range(min(self._max_batch, len(self._items)))]
            if not self._items:
                self._ready.clear()
            await self._flush(batch)

    async def _flush(self, batch: list[_Pending]) -> None:
        backoff = Backoff("complete")
        while True:
            try:
                async with self._pool.connection() as conn:
                    held = await transitions.complete_many(
                        conn, [p.job for p in batch], [p.result for p in batch]
                    )
                break
            except RETRYABLE as exc:
                await backoff.wait(exc)
            except Exception as exc:
                if len(batch) > 1:
                    # One bad row must not sink the others: record them one at a time.
                    for item in batch:
                        await self._flush([item])
                    return
                batch[0].landed(exc)
                return
        backoff.reset()
        self.statements += 1
        self.completed += len(held)
        for item in batch:
            item.landed(item.job.id in held)
