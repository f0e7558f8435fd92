"""A job's log lines newest first, paged by keyset (the job page reads from the top down)."""

from __future__ import annotations

from jobyard.core.read_models import KeysetPage, _limit, _page
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.ids import JobId, ProjectId


async def newest_first(
    conn: Conn,
    project_id: ProjectId,
    job_id: JobId,
    *,
    before_id: int | None = None,
    limit: int = 100,
) -> KeysetPage:
    """Lines older than `before_id` (None: the newest); `next_key` continues further back."""
    n = _limit(limit)
    rows = await run.all_rows(
        conn,
        "read_job_logs_newest",
        {"project_id": project_id, "job_id": job_id, "before_id": before_id, "limit": n + 1},
    )
    return _page(rows, n, "id")
