"""What the SDK reads back about jobs it enqueued: a handle's status and result, and the
testing helpers' view of what is waiting to run."""

from __future__ import annotations

from typing import Any

from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.ids import JobId, ProjectId


async def job_outcome(conn: Conn, project_id: ProjectId, job_id: JobId) -> dict[str, Any] | None:
    """id, status, result, last_error, progress and progress_message of one job (None if absent)."""
    return await run.one(conn, "read_job_outcome", {"project_id": project_id, "job_id": job_id})


async def enqueued_jobs(
    conn: Conn,
    project_id: ProjectId,
    *,
    handler: str | None = None,
    queue: str | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """Jobs waiting to run (queued, scheduled, waiting), oldest first."""
    return await run.all_rows(
        conn,
        "read_jobs_enqueued",
        {"project_id": project_id, "handler": handler, "queue": queue, "limit": limit},
    )


async def runnable_count(
    conn: Conn, project_id: ProjectId, queues: list[str], *, due_within_s: float = 0.0
) -> int:
    """Jobs of `queues` running or due within `due_within_s` (paused queues' jobs excluded).

    The window is what lets a caller wait for a retry whose short backoff has not elapsed
    yet: checked the instant after the failure, that retry is not due *now*.
    """
    row = await run.one(
        conn,
        "read_jobs_unfinished_count",
        {"project_id": project_id, "queues": queues, "due_within_s": float(due_within_s)},
    )
    assert row is not None
    return int(row["n"])
