"""One in-flight run on this worker and the reasons the runtime may stop it early."""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass
from enum import Enum
from typing import Any

from jobyard.domain.ids import JobId
from jobyard.domain.models import ClaimedJob
from jobyard.worker.context import JobContext
from jobyard.worker.registry import TaskSpec


class StopReason(Enum):
    """Why the runtime stopped a handler, which decides what (if anything) it records."""

    TIMEOUT = "timed_out"  # fail(outcome=timed_out): counts as an attempt
    CANCEL_REQUESTED = "cancelled"  # finish_cancelled
    LEASE_LOST = "lease_lost"  # record nothing: the reaper already closed this execution
    DRAIN = "released"  # release: attempt refunded (an aborted handler is not a failed one)
    WORKER_DEAD = "released_dead"  # the sweep declared this worker dead: release what it held


@dataclass(eq=False)
class Running:
    """A run from claim to its recorded outcome.

    No task supervises it: the handler task's done callback, a timer (timeout) or a stop
    request moves it on, so a no-op job costs one task instead of two plus an asyncio.wait.
    """

    job: ClaimedJob
    queue: str
    spec: TaskSpec | None
    ctx: JobContext
    # The job's copy of the context: its log fields are bound here once, and the handler
    # and any recording task run in it.
    context: contextvars.Context
    handler_task: asyncio.Task[Any] | None = None
    # The timeout while the handler runs; after a stop request, the wait for it to unwind.
    timer: asyncio.TimerHandle | None = None
    stop_reason: StopReason | None = None
    started: float = 0.0  # monotonic, for the debug line's duration
    # Set once the outcome is decided: a stop request or a late handler changes nothing.
    settled: bool = False
    # A plain `def` handler's thread: running its handler now; and whether the run had already
    # left the worker while it ran (an orphan thread, which holds a slot until it returns).
    # Both are read and written under the worker's thread lock.
    in_thread: bool = False
    left: bool = False
    orphaned: bool = False

    @property
    def key(self) -> tuple[JobId, int]:
        return (self.job.id, self.job.execution_seq)

    @property
    def timeout_s(self) -> float | None:
        if self.job.timeout_ms is not None:
            return self.job.timeout_ms / 1000.0
        return self.spec.timeout_s if self.spec is not None else None

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
