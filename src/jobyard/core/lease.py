"""Heartbeats: extend held leases and learn which were lost (engine rules 2 and 3)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.ids import JobId, WorkerId
from jobyard.domain.models import ClaimedJob, HeartbeatResult


async def heartbeat(
    conn: Conn,
    worker_id: WorkerId,
    held: Sequence[ClaimedJob],
    *,
    lease_s: float,
    capacity: int,
    draining: bool = False,
    orphan_threads: int = 0,
    now: datetime | None = None,
) -> HeartbeatResult:
    """One statement: mark the worker alive, record a beat, extend every lease it still holds.

    A job in `held` but absent from the result's `held` set was lost: its handler must stop.
    `alive=False` means the sweep declared this worker dead; it should register again.
    `orphan_threads`: handler threads still running after their run was recorded.
    """
    row = await run.one(
        conn,
        "lease_extend",
        {
            "worker_id": worker_id,
            "ids": [j.id for j in held],
            "seqs": [j.execution_seq for j in held],
            "lease_s": lease_s,
            "capacity": capacity,
            "draining": draining,
            "orphan_threads": orphan_threads,
            "now": sql_now(now),
        },
    )
    assert row is not None
    return HeartbeatResult(
        alive=bool(row["alive"]),
        paused=bool(row["paused"]),
        held=frozenset(JobId(i) for i in row["held"]),
        cancel_requested=frozenset(JobId(i) for i in row["cancel_requested"]),
    )
