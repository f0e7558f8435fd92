"""Fenced compare-and-set transitions for held jobs (engine rules 3 and 6).

Every UPDATE names the expected from-state and the (job id, worker id, execution_seq) fence, so
a worker that lost its lease changes nothing: the functions report which jobs it no longer held.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobyard.core.backoff import RetryPolicy, delay_ms
from jobyard.core.clock import sql_now
from jobyard.core.fingerprint import fingerprint
from jobyard.db import run
from jobyard.db.errors import translated
from jobyard.db.json import jsonb, jsonb_or_none
from jobyard.db.pool import Conn
from jobyard.domain import limits
from jobyard.domain.enums import DeadLetterReason, ExecutionOutcome, JobStatus
from jobyard.domain.errors import LeaseLost
from jobyard.domain.ids import JobId, ProjectId
from jobyard.domain.lifecycle import assert_transition
from jobyard.domain.models import ClaimedJob
from jobyard.domain.schemas import payload_size
from jobyard.domain.text import storable, storable_json


@dataclass(frozen=True)
class FailureResult:
    status: JobStatus  # scheduled (will retry) or dead_letter
    run_at: datetime | None
    dead_letter_id: int | None


def _fence(jobs: Sequence[ClaimedJob]) -> dict[str, Any]:
    return {"ids": [j.id for j in jobs], "seqs": [j.execution_seq for j in jobs]}


async def start_many(
    conn: Conn, jobs: Sequence[ClaimedJob], *, now: datetime | None = None
) -> set[JobId]:
    """claimed → running; returns the ids still held (the rest lost their lease)."""
    if not jobs:
        return set()
    rows = await run.all_rows(
        conn,
        "job_start_many",
        {**_fence(jobs), "worker_id": jobs[0].worker_id, "now": sql_now(now)},
    )
    return {JobId(r["id"]) for r in rows}


async def complete_many(
    conn: Conn,
    jobs: Sequence[ClaimedJob],
    results: Sequence[Any] | None = None,
    *,
    now: datetime | None = None,
) -> set[JobId]:
    """running → done in one statement; returns the ids completed (others were not held)."""
    if not jobs:
        return set()
    values = results if results is not None else [None] * len(jobs)
    async with translated():
        rows = await run.all_rows(
            conn,
            "job_complete_many",
            {
                **_fence(jobs),
                "results": [jsonb_or_none(v) for v in values],
                "worker_id": jobs[0].worker_id,
                "now": sql_now(now),
            },
        )
    return {JobId(r["id"]) for r in rows}


async def fail(
    conn: Conn,
    job: ClaimedJob,
    error_type: str,
    message: str,
    *,
    outcome: ExecutionOutcome = ExecutionOutcome.FAILED,
    retryable: bool = True,
    traceback: str | None = None,
    now: datetime | None = None,
    rng: random.Random | None = None,
) -> FailureResult:
    """Record a failed run: retry later (failed → scheduled) or dead-letter when exhausted.

    `traceback` (the handler's formatted traceback) is stored with the run, cut to
    MAX_TRACEBACK_LENGTH. Raises LeaseLost if this worker no longer holds the run.
    """
    fence = {"id": job.id, "seq": job.execution_seq, "worker_id": job.worker_id}
    async with conn.transaction():
        ctx = await run.one(conn, "job_retry_context", fence)
        if ctx is None:
            raise LeaseLost(job_id=job.id, execution_seq=job.execution_seq)
        assert_transition(JobStatus(ctx["status"]), JobStatus.FAILED)
        exhausted = not retryable or ctx["attempt"] >= ctx["max_attempts"]
        next_status = JobStatus.DEAD_LETTER if exhausted else JobStatus.SCHEDULED
        assert_transition(JobStatus.FAILED, next_status)
        delay_s = 0.0
        if not exhausted:
            policy = RetryPolicy.from_row(ctx, ctx["retry_override"])
            delay_s = delay_ms(policy, ctx["attempt"], rng) / 1000.0
        reason = (
            DeadLetterReason.TIMED_OUT
            if outcome is ExecutionOutcome.TIMED_OUT
            else DeadLetterReason.EXHAUSTED
        )
        # A handler's exception may say what no text column holds (NUL, a lone surrogate).
        error_type, message = storable(error_type), storable(message)
        text = f"{error_type}: {message}"[: limits.MAX_ERROR_LENGTH]
        row = await run.one(
            conn,
            "job_fail",
            {
                **fence,
                "next_status": next_status.value,
                "delay_s": delay_s,
                "error": text,
                "fingerprint": fingerprint(error_type, message),
                "outcome": outcome.value,
                "dlq_reason": reason.value,
                "traceback": None if traceback is None else truncate_traceback(storable(traceback)),
                "now": sql_now(now),
            },
        )
    if row is None:
        raise LeaseLost(job_id=job.id, execution_seq=job.execution_seq)
    return FailureResult(
        status=JobStatus(row["status"]),
        run_at=row["run_at"] if next_status is JobStatus.SCHEDULED else None,
        dead_letter_id=row["dead_letter_id"],
    )


async def release_many(
    conn: Conn, jobs: Sequence[ClaimedJob], *, now: datetime | None = None
) -> set[JobId]:
    """Give held jobs back to the queue without charging the attempt (graceful drain)."""
    if not jobs:
        return set()
    rows = await run.all_rows(
        conn,
        "job_release_many",
        {**_fence(jobs), "worker_id": jobs[0].worker_id, "now": sql_now(now)},
    )
    return {JobId(r["id"]) for r in rows}


async def finish_cancelled(conn: Conn, job: ClaimedJob, *, now: datetime | None = None) -> bool:
    """The worker stopped a job whose cancel was requested; record it as cancelled."""
    row = await run.one(
        conn,
        "job_finish_cancelled",
        {"id": job.id, "seq": job.execution_seq, "worker_id": job.worker_id, "now": sql_now(now)},
    )
    return row is not None


async def cancel(
    conn: Conn, project_id: ProjectId, job_id: JobId, *, now: datetime | None = None
) -> dict[str, Any] | None:
    """Cancel a job: pending ones at once; held ones by asking their worker to stop.

    Returns the job row after the change, or None if it does not exist or is already finished.
    """
    params = {"project_id": project_id, "job_id": job_id, "now": sql_now(now)}
    row = await run.one(conn, "job_cancel_pending", params)
    if row is not None:
        return row
    row = await run.one(conn, "job_request_cancel", params)
    if row is not None:
        row.pop("notified", None)
    return row


async def append_log(
    conn: Conn,
    job: ClaimedJob,
    level: str,
    message: str,
    fields: dict[str, Any] | None = None,
) -> None:
    """Write a job_logs line while this run is still held; LeaseLost otherwise."""
    async with translated():
        row = await run.one(
            conn,
            "job_log_append",
            {
                "id": job.id,
                "seq": job.execution_seq,
                "worker_id": job.worker_id,
                "level": level,
                "message": storable(message)[: limits.MAX_LOG_MESSAGE_LENGTH],
                "fields": jsonb(_log_fields(fields)),
            },
        )
    if row is None:
        raise LeaseLost(job_id=job.id, execution_seq=job.execution_seq)


def _log_fields(fields: dict[str, Any] | None) -> Any:
    """A log line's fields as stored: made storable, and replaced by a note when larger than
    the table keeps (the line is written, as a long message is written cut, rather than the
    handler's log call failing its job)."""
    stored = storable_json(fields or {})
    size = payload_size(stored)
    if size > limits.MAX_LOG_FIELDS_BYTES:
        return {
            "fields_dropped": f"{size:,} bytes of fields, more than the "
            f"{limits.MAX_LOG_FIELDS_BYTES // 1024} KB a log line keeps"
        }
    return stored


def truncate_traceback(text: str, limit: int = limits.MAX_TRACEBACK_LENGTH) -> str:
    """`text` cut to `limit` characters, keeping its head and its tail (where the exception
    is) and saying how much was cut in between."""
    if len(text) <= limit:
        return text
    # Reserve room for the marker (its digits never exceed those of len(text)).
    marker_room = len(_CUT_MARKER.format(cut=len(text)))
    keep = limit - marker_room
    head = keep // 3
    tail = keep - head
    cut = len(text) - head - tail
    return text[:head] + _CUT_MARKER.format(cut=cut) + text[len(text) - tail :]


_CUT_MARKER = "\n... [{cut} characters of traceback cut by jobyard] ...\n"


async def set_progress(conn: Conn, job: ClaimedJob, fraction: float, message: str | None) -> None:
    """Record the held run's progress (0..1 and an optional message); LeaseLost otherwise."""
    text = None if message is None else storable(message)
    if text is not None and len(text) > limits.MAX_PROGRESS_MESSAGE_LENGTH >= len(message or ""):
        # Escaping NUL or a lone surrogate lengthened a message that fitted: cut the escapes.
        text = text[: limits.MAX_PROGRESS_MESSAGE_LENGTH]
    async with translated():
        row = await run.one(
            conn,
            "job_progress_set",
            {
                "id": job.id,
                "seq": job.execution_seq,
                "worker_id": job.worker_id,
                "fraction": fraction,
                "message": text,
            },
        )
    if row is None:
        raise LeaseLost(job_id=job.id, execution_seq=job.execution_seq)
