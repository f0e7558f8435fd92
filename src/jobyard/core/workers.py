"""Worker registration and departure."""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Any, Final

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain import limits
from jobyard.domain.errors import Conflict, NotFound
from jobyard.domain.ids import ProjectId, WorkerId
from jobyard.domain.models import LoopStall
from jobyard.domain.text import storable


async def register(
    conn: Conn,
    project_id: ProjectId,
    *,
    name: str,
    queues: list[str],
    concurrency: int,
    handlers: list[str] | None = None,
    now: datetime | None = None,
) -> WorkerId:
    """Register a worker. `handlers`: the names it can run (None: not reported)."""
    row = await run.one(
        conn,
        "worker_register",
        {
            "project_id": project_id,
            "name": name,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "queues": queues,
            "concurrency": concurrency,
            "handlers": handlers,
            "now": sql_now(now),
        },
    )
    assert row is not None
    return WorkerId(row["id"])


# What one report may carry: the columns' CHECK bounds the whole object at 4 KB.
STALL_JOB_IDS: Final = 20
STALL_TEXT_CHARS: Final = 500


async def record_loop_stall(
    conn: Conn, worker_id: WorkerId, stall: LoopStall, *, now: datetime | None = None
) -> None:
    """The worker's latest event-loop stall (and how many it has had), for operators."""
    await run.execute(
        conn,
        "worker_loop_stall",
        {
            "worker_id": worker_id,
            "stalls": stall.number,
            "blocked_s": max(0.0, stall.blocked_s),
            "ongoing": stall.ongoing,
            "handler": None if stall.handler is None else stall.handler[:STALL_TEXT_CHARS],
            "job_ids": list(stall.job_ids[:STALL_JOB_IDS]),
            "at": storable(stall.at[:STALL_TEXT_CHARS]),
            "now": sql_now(now),
        },
    )


async def set_paused(
    conn: Conn,
    project_id: ProjectId,
    worker_id: WorkerId,
    paused: bool,
    *,
    by: str,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Pause (claim nothing) or resume a live worker of the project; it follows from its next
    heartbeat. `by` names the operator (kept with the pause). NotFound if the project has no
    such worker, Conflict if it has stopped."""
    row = await run.one(
        conn,
        "worker_set_paused",
        {
            "project_id": project_id,
            "worker_id": worker_id,
            "paused": paused,
            "by": storable(by)[: limits.MAX_NAME_LENGTH] or "unknown",
            "now": sql_now(now),
        },
    )
    if row is not None:
        return row
    gone = await run.one(
        conn, "read_worker_get", {"project_id": project_id, "worker_id": worker_id}
    )
    if gone is None:
        raise NotFound("worker not found")
    raise Conflict(
        f"worker {worker_id} is {gone['status']}: only an active or draining worker can be "
        f"{'paused' if paused else 'resumed'}",
        field="worker_id",
    )


async def stop(conn: Conn, worker_id: WorkerId, *, now: datetime | None = None) -> None:
    await run.execute(conn, "worker_stop", {"worker_id": worker_id, "now": sql_now(now)})
