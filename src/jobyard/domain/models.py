"""Frozen records the engine passes around (rows from the database, typed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from jobyard.domain.ids import ExecutionSeq, JobId, ProjectId, QueueId, WorkerId


class ClaimedJob(NamedTuple):
    """One claimed run: the fence (id, worker_id, execution_seq) plus what the handler needs.

    A NamedTuple rather than a frozen dataclass: a worker builds one per job, and a frozen
    dataclass's per-field `object.__setattr__` made that ~3 µs instead of under 1.
    """

    id: JobId
    project_id: ProjectId
    queue_id: QueueId
    handler: str
    payload: Any
    priority: int
    attempt: int
    max_attempts: int
    execution_seq: ExecutionSeq
    timeout_ms: int | None
    lock_expires_at: datetime
    worker_id: WorkerId
    # Claimed as a suspect (its last run died with its worker): it runs alone.
    suspect: bool = False

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ClaimedJob:
        return cls(
            id=JobId(row["id"]),
            project_id=ProjectId(row["project_id"]),
            queue_id=QueueId(row["queue_id"]),
            handler=row["handler"],
            payload=row["payload"],
            priority=row["priority"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            execution_seq=ExecutionSeq(row["execution_seq"]),
            timeout_ms=row["timeout_ms"],
            lock_expires_at=row["lock_expires_at"],
            worker_id=WorkerId(row["worker_id"]),
            suspect=bool(row.get("suspect", False)),
        )


@dataclass(frozen=True)
class QueueRef:
    id: QueueId
    name: str
    priority: int
    is_paused: bool
    max_concurrency: int | None


@dataclass(frozen=True)
class HeartbeatResult:
    alive: bool
    held: frozenset[JobId]
    cancel_requested: frozenset[JobId]
    paused: bool = False  # an operator paused this worker: claim nothing until resumed


@dataclass(frozen=True)
class LoopStall:
    """An event-loop stall a worker's loop watch saw: `number` counts them since the worker
    started; `ongoing` until the loop turns again, when `blocked_s` is its final length."""

    number: int
    blocked_s: float
    ongoing: bool
    handler: str | None  # the registered handler on the loop thread's stack, if any
    job_ids: tuple[int, ...]  # the jobs running that handler
    at: str  # file:line in function, of the innermost frame


@dataclass(frozen=True)
class EnqueueResult:
    job: dict[str, Any]
    created: bool


@dataclass(frozen=True)
class BatchResult:
    batch_id: int
    job_ids: list[int] = field(default_factory=list)
    queued: int = 0
