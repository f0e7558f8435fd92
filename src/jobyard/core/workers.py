"""Worker registration and departure."""

from __future__ import annotations

import os
import socket
from datetime import datetime

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId, WorkerId


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


async def stop(conn: Conn, worker_id: WorkerId, *, now: datetime | None = None) -> None:
    await run.execute(conn, "worker_stop", {"worker_id": worker_id, "now": sql_now(now)})
