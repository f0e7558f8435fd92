"""Test data with sensible defaults. Each returns the new row as a dict."""

from __future__ import annotations

import itertools
from typing import Any

from psycopg.types.json import Jsonb

from jobyard.db.pool import Conn

_seq = itertools.count(1)


async def _one(conn: Conn, query: str, params: dict[str, Any]) -> dict[str, Any]:
    cur = await conn.execute(query, params)  # type: ignore[arg-type]
    row = await cur.fetchone()
    assert row is not None
    return row


async def make_org(conn: Conn, *, name: str | None = None) -> dict[str, Any]:
    n = next(_seq)
    return await _one(
        conn,
        "INSERT INTO organizations (name, slug) VALUES (%(name)s, %(slug)s) RETURNING *",
        {"name": name or f"Org {n}", "slug": f"org-{n}"},
    )


async def make_project(conn: Conn, *, org_id: int | None = None) -> dict[str, Any]:
    if org_id is None:
        org_id = (await make_org(conn))["id"]
    n = next(_seq)
    return await _one(
        conn,
        "INSERT INTO projects (org_id, name, slug) VALUES (%(org)s, %(name)s, %(slug)s) RETURNING *",
        {"org": org_id, "name": f"Project {n}", "slug": f"project-{n}"},
    )


async def make_queue(
    conn: Conn,
    *,
    project_id: int | None = None,
    name: str | None = None,
    priority: int = 0,
    is_paused: bool = False,
    max_concurrency: int | None = None,
) -> dict[str, Any]:
    if project_id is None:
        project_id = (await make_project(conn))["id"]
    return await _one(
        conn,
        """INSERT INTO queues (project_id, name, priority, is_paused, max_concurrency)
           VALUES (%(p)s, %(name)s, %(prio)s, %(paused)s, %(mc)s) RETURNING *""",
        {
            "p": project_id,
            "name": name or f"queue-{next(_seq)}",
            "prio": priority,
            "paused": is_paused,
            "mc": max_concurrency,
        },
    )


async def make_worker(conn: Conn, *, project_id: int, name: str = "w") -> dict[str, Any]:
    return await _one(
        conn,
        """INSERT INTO workers (project_id, name, concurrency) VALUES (%(p)s, %(n)s, 4)
           RETURNING *""",
        {"p": project_id, "n": name},
    )


async def make_job(
    conn: Conn,
    *,
    queue: dict[str, Any],
    handler: str = "noop",
    payload: dict[str, Any] | None = None,
    status: str = "queued",
    priority: int = 0,
) -> dict[str, Any]:
    return await _one(
        conn,
        """INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, finished_at)
           VALUES (%(p)s, %(q)s, %(h)s, %(payload)s, %(s)s::job_status, %(prio)s,
                   CASE WHEN %(s)s::job_status IN ('done', 'dead_letter', 'cancelled') THEN now() END)
           RETURNING *""",
        {
            "p": queue["project_id"],
            "q": queue["id"],
            "h": handler,
            "payload": Jsonb(payload or {}),
            "s": status,
            "prio": priority,
        },
    )
