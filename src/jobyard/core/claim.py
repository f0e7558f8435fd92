"""Claim: hand each queued job to exactly one worker (engine rule 1).

The sole user of the job_claim_* queries. One queue per statement, so queue_id is an equality
prefix of the ready set's claim index (job_ready, migration 0012) and LIMIT stops early; FOR
UPDATE SKIP LOCKED lets concurrent claimers pass over each other's rows instead of waiting or
double-claiming. `rotate_ready` empties the ready partition that becomes current next, so dead
ready rows never pile up, whatever snapshot another session holds (docs/DATABASE.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.ids import ProjectId, QueueId, WorkerId
from jobyard.domain.models import ClaimedJob, QueueRef


@dataclass(frozen=True)
class Claim:
    """What one claim statement gave: the jobs, and whether a suspect waits for a worker that
    holds nothing (only reported to a claim made without `solo`)."""

    jobs: list[ClaimedJob]
    suspect_waiting: bool = False


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
    `claimed` until `transitions.start_many`. Suspects are never taken here (see `claim`).
    """
    return (await claim(conn, queue, worker_id, n, lease_s=lease_s, start=start, now=now)).jobs


async def claim(
    conn: Conn,
    queue: QueueRef,
    worker_id: WorkerId,
    n: int,
    *,
    lease_s: float,
    start: bool = False,
    solo: bool = False,
    now: datetime | None = None,
) -> Claim:
    """claim_batch for a worker. `solo` says the worker holds nothing (and will claim nothing
    else while a suspect runs): then the claim takes one suspect, alone, if the queue has one,
    and otherwise up to n jobs as usual.

    `queue` may be stale (workers cache settings): the statement re-reads pause and limit, and
    a limit the cache did not know about makes it claim nothing until re-read under the lock.
    """
    if n <= 0:
        return Claim([])
    params = {
        "queue_id": queue.id,
        "worker_id": worker_id,
        "n": n,
        "lease_s": lease_s,
        "start": start,
        "solo": solo,
        "limited": queue.max_concurrency is not None,
        "now": sql_now(now),
    }
    if queue.max_concurrency is None:
        # No limit: no queue lock, claims on this queue stay fully parallel.
        return _parse(await run.all_rows(conn, "job_claim_batch", params))
    async with conn.transaction():
        # Lock first, count in the next statement: in READ COMMITTED a statement's snapshot is
        # taken when it starts, so a count in the locking statement could miss claims committed
        # while it waited for the lock.
        await run.one(conn, "job_claim_lock_queue", params)
        room_row = await run.one(conn, "job_claim_room", params)
        room = int(room_row["room"]) if room_row else 0
        if room <= 0:
            return Claim([])
        rows = await run.all_rows(conn, "job_claim_batch", {**params, "n": room})
    return _parse(rows)


def _parse(rows: list[dict[str, Any]]) -> Claim:
    # The statement's last row, all NULLs, is the "a suspect waits" flag, not a job.
    if rows and rows[-1]["suspect_waiting"]:
        return Claim([ClaimedJob.from_row(r) for r in rows[:-1]], suspect_waiting=True)
    return Claim([ClaimedJob.from_row(r) for r in rows])


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


# How long a rotation may wait for the exclusive lock on the partition it empties. Claims queue
# behind a waiting ACCESS EXCLUSIVE request, so this bounds the stall it can cause them.
ROTATE_WAIT_MS = 20
# How often a process tries to rotate: twice per period of job_ready_slot (two seconds), so each
# partition is emptied once before it becomes current again.
ROTATE_EVERY_S = 1.0


async def rotate_ready(conn: Conn, *, wait_ms: int = ROTATE_WAIT_MS) -> str:
    """Empty the job_ready partition that becomes current next (migration 0012).

    Returns 'clean' (nothing to free), 'crowded' (a backlog: more than 2,000 live rows would
    be copied under the lock, so the partition waits until claims drain it; migration 0015),
    'busy' (another session rotates), 'locked' (a session holds the partition; tried again on
    the next call) or 'rotated'. Cheap when there is nothing to do, so every worker and the
    scheduler call it about once a second.
    """
    row = await run.one(conn, "job_claim_rotate_ready", {"wait_ms": wait_ms})
    return str(row["outcome"]) if row else "clean"
