"""Failure groups: failing jobs across queues grouped by error fingerprint (core/fingerprint.py
normalizes ids, numbers and addresses out of the message, so one bug is one group)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.errors import NotFound
from jobyard.domain.ids import ProjectId

TREND_HOURS: Final = 24
MAX_GROUPS: Final = 200


async def list_groups(
    conn: Conn,
    project_id: ProjectId,
    *,
    fingerprint: str | None = None,
    limit: int = 100,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """Groups, most recently seen first, each with `trend`: failing jobs per hour over the last
    24 hours, oldest hour first."""
    groups = await run.all_rows(
        conn,
        "failure_groups",
        {
            "project_id": project_id,
            "fingerprint": fingerprint,
            "limit": max(1, min(limit, MAX_GROUPS)),
            "now": sql_now(now),
        },
    )
    if not groups:
        return []
    rows = await run.all_rows(
        conn,
        "failure_trend",
        {
            "project_id": project_id,
            "fingerprints": [g["fingerprint"] for g in groups],
            "now": sql_now(now),
        },
    )
    # Hours are keyed from the latest one any row names, so the database clock sets "now".
    latest = max([r["hour"] for r in rows] + [g["last_seen_at"] for g in groups]).replace(
        minute=0, second=0, microsecond=0
    )
    hours = [latest - timedelta(hours=TREND_HOURS - 1 - i) for i in range(TREND_HOURS)]
    counts = {(r["fingerprint"], r["hour"]): int(r["n"]) for r in rows}
    for g in groups:
        g["trend"] = [counts.get((g["fingerprint"], h), 0) for h in hours]
    return groups


async def get_group(conn: Conn, project_id: ProjectId, fingerprint: str) -> dict[str, Any]:
    found = await list_groups(conn, project_id, fingerprint=fingerprint, limit=1)
    if not found:
        raise NotFound("no failing jobs have this fingerprint")
    return found[0]
