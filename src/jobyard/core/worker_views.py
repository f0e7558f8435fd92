"""Read models of the worker detail page and the workers topology (dashboard)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from jobyard.core.clock import sql_now
from jobyard.core.read_models import with_loop_stall
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.errors import NotFound
from jobyard.domain.ids import ProjectId, WorkerId

RECENT_RUNS: Final = 20
# The page lists the jobs held longest; a worker may hold hundreds (its concurrency), and a
# row per job costs render time: past this many it shows the count and links the explorer.
HELD_SHOWN: Final = 100
TOPOLOGY_WORKERS: Final = 40


def stall_place(stall: dict[str, Any]) -> str:
    """Where an event-loop stall stood: "by handler 'resize' (job #4) at tasks.py:9 in resize"."""
    by = f"handler {stall['handler']!r}" if stall.get("handler") else "code outside any handler"
    jobs = ", ".join(f"#{i}" for i in stall.get("job_ids") or [])
    return f"by {by}{f' (job {jobs})' if jobs else ''} at {stall['at']}"


def health_words(worker: dict[str, Any]) -> list[str]:
    """What is wrong with a live worker now, in a few words each (empty: nothing): paused by
    an operator, its event loop blocked, handler threads that outlived their runs."""
    if worker["status"] not in ("active", "draining"):
        return []
    said = []
    if worker.get("paused_at"):
        said.append("paused")
    stall = worker.get("loop_stall")
    if stall and stall["ongoing"]:
        said.append(f"loop blocked by {stall['handler'] or 'non-handler code'}")
    if worker.get("orphan_threads"):
        said.append(f"{worker['orphan_threads']} orphan thread(s)")
    return said


async def worker_detail(
    conn: Conn, project_id: ProjectId, worker_id: WorkerId, *, now: datetime | None = None
) -> dict[str, Any]:
    params = {"project_id": project_id, "worker_id": worker_id, "now": sql_now(now)}
    worker = await run.one(conn, "read_worker_detail", params)
    if worker is None:
        raise NotFound("worker not found")
    with_loop_stall(worker)
    worker["held"] = await run.all_rows(
        conn, "read_worker_held_jobs", {**params, "held_shown": HELD_SHOWN}
    )
    worker["in_flight"] = len(worker["held"])
    if worker["in_flight"] >= HELD_SHOWN:  # more than the page lists: count them all
        row = await run.one(conn, "read_worker_in_flight", params)
        worker["in_flight"] = int(row["n"]) if row else 0
    worker["recent_runs"] = await run.all_rows(
        conn, "read_worker_recent_runs", {**params, "limit": RECENT_RUNS}
    )
    return worker


async def topology_workers(
    conn: Conn, project_id: ProjectId, *, now: datetime | None = None
) -> list[dict[str, Any]]:
    rows = await run.all_rows(
        conn,
        "read_topology_workers",
        {"project_id": project_id, "limit": TOPOLOGY_WORKERS, "now": sql_now(now)},
    )
    return [with_loop_stall(r) for r in rows]


async def topology_queues(
    conn: Conn, project_id: ProjectId, *, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Queues with claimable depth, in flight and the capacity they can draw on."""
    return await run.all_rows(
        conn, "read_metrics_queues", {"project_id": project_id, "now": sql_now(now)}
    )
