"""Claim: hand each queued job to exactly one worker (engine rule 1).

The sole user of the job_claim_* queries. One queue per statement, so queue_id is an equality
prefix of the partial claim index and LIMIT stops early; FOR UPDATE SKIP LOCKED lets concurrent
claimers pass over each other's rows instead of waiting or double-claiming.
"""

from __future__ import annotations

from datetime import datetime

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId, QueueId, WorkerId
from jobyard.domain.models import ClaimedJob, QueueRef


async def claim_batch(
    conn: Conn,
    queue: QueueRef,
    worker_id: WorkerId,
    n: int,
    *,
    lease_s: float,
    start: bool = False,
    now: datetime | None = None,
) -> list[ClaimedJob]:
    """Claim up to n jobs from one queue (fewer if its max_concurrency leaves less room).

    With start=True the jobs are also started (claimed → running) in the same statement: what
    a worker does, since it claims only as many jobs as it has free slots. Without it they stay
    `claimed` until `transitions.start_many`.
    """
    if n <= 0:
        return []
    params = {
        "queue_id": queue.id,
        "worker_id": worker_id,
        "n": n,
        "lease_s": lease_s,
        "start": start,
        "now": sql_now(now),
    }
    if queue.max_concurrency is None:
        # No limit: no queue lock, claims on this queue stay fully parallel.
        rows = await run.all_rows(conn, "job_claim_batch", params)
        return [ClaimedJob.from_row(r) for r in rows]
    async with conn.transaction():
        # Lock first, count in the next statement: in READ COMMITTED a statement's snapshot is
        # taken when it starts, so a count in the locking statement could miss claims committed
        # while it waited for the lock.
        await run.one(conn, "job_claim_lock_queue", params)
        room_row = await run.one(conn, "job_claim_room", params)
        room = int(room_row["room"]) if room_row else 0
        if room <= 0:
            return []
        rows = await run.all_rows(conn, "job_claim_batch", {**params, "n": room})
    return [ClaimedJob.from_row(r) for r in rows]


async def queues_by_names(conn: Conn, project_id: ProjectId, names: list[str]) -> list[QueueRef]:
    """The named queues in claim order: highest queue priority first."""
    rows = await run.all_rows(
        conn, "queue_list_by_names", {"project_id": project_id, "names": names}
    )
    return [
        QueueRef(
            id=QueueId(r["id"]),
            name=r["name"],
            priority=r["priority"],
            is_paused=r["is_paused"],
            max_concurrency=r["max_concurrency"],
        )
        for r in rows
    ]
