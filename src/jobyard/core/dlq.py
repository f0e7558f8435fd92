"""Dead letters: edit, replay as a new job, delete. Rows are only removed by a user."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.errors import translated
from jobyard.db.json import jsonb, jsonb_or_none
from jobyard.db.pool import Conn
from jobyard.domain.errors import Conflict, NotFound
from jobyard.domain.ids import ProjectId
from jobyard.domain.schemas import ensure_payload_fits


async def get(conn: Conn, project_id: ProjectId, dlq_id: int) -> dict[str, Any]:
    row = await run.one(conn, "dlq_get", {"id": dlq_id, "project_id": project_id})
    if row is None:
        raise NotFound("dead letter not found")
    return row


async def update_payload(
    conn: Conn, project_id: ProjectId, dlq_id: int, payload: Any
) -> dict[str, Any]:
    ensure_payload_fits(payload)
    async with translated():
        row = await run.one(
            conn,
            "dlq_update_payload",
            {"id": dlq_id, "project_id": project_id, "payload": jsonb(payload)},
        )
    if row is None:
        raise NotFound("dead letter not found")
    return row


async def replay(
    conn: Conn,
    project_id: ProjectId,
    dlq_id: int,
    *,
    payload: Any = None,
    max_attempts: int | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Enqueue the dead letter again as a new queued job (optionally with an edited payload).

    A new job rather than reviving the old row: the old job's history stays as it ended, and a
    dead letter whose job was pruned by retention can still be replayed.
    """
    if payload is not None:
        ensure_payload_fits(payload)
    async with translated():
        row = await run.one(
            conn,
            "dlq_replay",
            {
                "id": dlq_id,
                "project_id": project_id,
                "payload": jsonb_or_none(payload),
                "max_attempts": max_attempts,
                "now": sql_now(now),
            },
        )
    if row is None:
        letter = await get(conn, project_id, dlq_id)  # NotFound if it is not this project's
        job = letter["replay_job_id"]
        into = f"as job {job}" if job is not None else "(that job has since been deleted)"
        raise Conflict(
            f"dead letter {dlq_id} was already replayed {into}; follow that job (retry it, or "
            "replay its own dead letter): a second replay would run the work twice",
            field="replay_job_id",
        )
    row.pop("notified", None)
    return row


async def delete(conn: Conn, project_id: ProjectId, dlq_id: int) -> None:
    row = await run.one(conn, "dlq_delete", {"id": dlq_id, "project_id": project_id})
    if row is None:
        raise NotFound("dead letter not found")


async def counts(conn: Conn, project_id: ProjectId) -> dict[str, int]:
    """Letters still waiting (the overview's count) and letters already replayed."""
    row = await run.one(conn, "dlq_counts", {"project_id": project_id})
    assert row is not None
    return {"waiting": int(row["waiting"]), "replayed": int(row["replayed"])}
