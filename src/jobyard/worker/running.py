"""One in-flight run on this worker and the reasons the runtime may stop it early."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import Enum
from typing import Any

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
    job: ClaimedJob
    queue: str
    spec: TaskSpec | None
    ctx: JobContext
    stop: asyncio.Future[StopReason]
    supervisor: asyncio.Task[Any] | None = None
    handler_task: asyncio.Task[Any] | None = None
    # Set once the outcome is decided: a stop request after that changes nothing.
    settled: bool = False

    @property
    def timeout_s(self) -> float | None:
        if self.job.timeout_ms is not None:
            return self.job.timeout_ms / 1000.0
        return self.spec.timeout_s if self.spec is not None else None

    def request_stop(self, reason: StopReason) -> bool:
        """Ask the supervisor to stop the handler; False if the outcome is already decided."""
        if self.settled or self.stop.done():
            return False
        self.stop.set_result(reason)
        return True
