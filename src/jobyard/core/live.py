"""Dashboard change events: one NOTIFY on `jobyard_events` that the API's single listener
(web.live) fans out to every open dashboard. Payloads are `kind:queue_id[:job_id]`; the
stats loop sends `stats:<queue ids>` after each fold (core.stats)."""

from __future__ import annotations

from jobyard.db import run
from jobyard.db.pool import Conn


async def notify(conn: Conn, kind: str, queue_id: int | None, job_id: int | None = None) -> None:
    parts = [kind, "" if queue_id is None else str(queue_id)]
    if job_id is not None:
        parts.append(str(job_id))
    await run.one(conn, "live_notify", {"payload": ":".join(parts)})


async def listeners(conn: Conn) -> int:
    """How many sessions LISTEN for dashboard events (a test counts them: one per API process)."""
    row = await run.one(conn, "live_listeners")
    return int(row["n"]) if row else 0


async def listen(conn: Conn) -> None:
    """Subscribe `conn` (the API process's one listener) to every channel dashboards follow."""
    await run.execute(conn, "live_listen")
