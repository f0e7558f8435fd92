"""Read models for the API and dashboard: keyset-paginated lists, single reads, metrics.

Every list is keyset-paginated (never OFFSET): the caller passes the key of the last row it saw
and gets rows strictly after it, so rows inserted between two page fetches never shift a page
(no duplicates, no gaps). Each page reads `limit + 1` rows to know whether another page exists.
Everything is scoped by project id: another project's id reads as "not found".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from jobyard.core import stats
from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.enums import JobStatus, WorkerStatus
from jobyard.domain.errors import NotFound
from jobyard.domain.ids import JobId, ProjectId, QueueId, WorkerId

MAX_PAGE_SIZE: Final = 500
# Ids follow creation order only up to the enqueuing transaction's length (created_at is its
# start time, the id is taken at insert): created_at windows are widened by this much before
# they become id bounds, and the exact created_at test still applies inside them.
CREATED_ID_SLACK: Final = timedelta(minutes=1)
RECENT_HEARTBEATS: Final = 20


@dataclass(frozen=True)
class KeysetPage:
    """One page of rows; `next_key` is the key to pass for the next page (None: last page)."""

    items: list[dict[str, Any]]
    next_key: int | None


@dataclass(frozen=True)
class JobFilters:
    statuses: Sequence[JobStatus] | None = None
    queue: str | None = None
    handler: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    error_fingerprint: str | None = None


def _limit(limit: int) -> int:
    return max(1, min(limit, MAX_PAGE_SIZE))


def _page(rows: list[dict[str, Any]], limit: int, key: str) -> KeysetPage:
    if len(rows) > limit:
        rows = rows[:limit]
        return KeysetPage(items=rows, next_key=int(rows[-1][key]))
    return KeysetPage(items=rows, next_key=None)


async def _required(conn: Conn, name: str, params: dict[str, Any], what: str) -> dict[str, Any]:
    row = await run.one(conn, name, params)
    if row is None:
        raise NotFound(f"{what} not found")
    return row


# ----------------------------------------------------------------------------- queues, policies


async def list_queues(
    conn: Conn, project_id: ProjectId, *, after_id: int | None = None, limit: int = 50
) -> KeysetPage:
    n = _limit(limit)
    rows = await run.all_rows(
        conn, "read_queues_page", {"project_id": project_id, "after_id": after_id, "limit": n + 1}
    )
    return _page(rows, n, "id")


async def get_queue(conn: Conn, project_id: ProjectId, queue_id: QueueId) -> dict[str, Any]:
    return await _required(
        conn, "read_queue_get", {"project_id": project_id, "queue_id": queue_id}, "queue"
    )


async def list_policies(
    conn: Conn, project_id: ProjectId, *, after_id: int | None = None, limit: int = 50
) -> KeysetPage:
    n = _limit(limit)
    rows = await run.all_rows(
        conn,
        "read_retry_policies_page",
        {"project_id": project_id, "after_id": after_id, "limit": n + 1},
    )
    return _page(rows, n, "id")


async def get_policy(conn: Conn, project_id: ProjectId, policy_id: int) -> dict[str, Any]:
    return await _required(
        conn,
        "read_retry_policy_get",
        {"project_id": project_id, "policy_id": policy_id},
        "retry policy",
    )


# ----------------------------------------------------------------------------- jobs


async def list_jobs(
    conn: Conn,
    project_id: ProjectId,
    filters: JobFilters | None = None,
    *,
    before_id: int | None = None,
    limit: int = 50,
) -> KeysetPage:
    """The job explorer: newest first; `before_id` continues after the last id seen."""
    f = filters or JobFilters()
    n = _limit(limit)
    rows = await run.all_rows(
        conn,
        "read_jobs_page",
        {
            "project_id": project_id,
            "before_id": before_id,
            "statuses": [s.value for s in f.statuses] if f.statuses else None,
            "queue": f.queue,
            "handler": f.handler,
            "created_from": f.created_from,
            "created_to": f.created_to,
            "min_id": await _id_at(conn, f.created_from, -CREATED_ID_SLACK),
            "max_id": await _id_at(conn, f.created_to, CREATED_ID_SLACK),
            "fingerprint": f.error_fingerprint,
            "limit": n + 1,
        },
    )
    return _page(rows, n, "id")


async def _id_at(conn: Conn, at: datetime | None, slack: timedelta) -> int | None:
    """An id bound for a created_at bound (read_job_id_at: a bisection of the primary key, so a
    day's window scans that day's ids instead of every newer job); None when `at` is None."""
    if at is None:
        return None
    try:
        widened = at + slack
    except OverflowError:  # within a minute of year 1 or 9999: no id bound on that side
        return None
    row = await run.one(conn, "read_job_id_at", {"at": widened})
    return None if row is None or row["id"] is None else int(row["id"])


async def get_job(conn: Conn, project_id: ProjectId, job_id: JobId) -> dict[str, Any]:
    """A job with its queue name and a summary of its executions."""
    params = {"project_id": project_id, "job_id": job_id}
    job = await _required(conn, "read_job_get", params, "job")
    summary = await run.one(conn, "read_job_execution_summary", params)
    job["executions"] = summary
    return job


async def list_executions(
    conn: Conn,
    project_id: ProjectId,
    job_id: JobId,
    *,
    after_seq: int | None = None,
    limit: int = 50,
) -> KeysetPage:
    await _required(conn, "read_job_get", {"project_id": project_id, "job_id": job_id}, "job")
    n = _limit(limit)
    rows = await run.all_rows(
        conn,
        "read_job_executions_page",
        {"project_id": project_id, "job_id": job_id, "after_seq": after_seq, "limit": n + 1},
    )
    return _page(rows, n, "execution_seq")


async def list_logs(
    conn: Conn,
    project_id: ProjectId,
    job_id: JobId,
    *,
    after_id: int | None = None,
    execution_seq: int | None = None,
    limit: int = 100,
) -> KeysetPage:
    """A job's log lines oldest first; lines written meanwhile appear on later pages."""
    await _required(conn, "read_job_get", {"project_id": project_id, "job_id": job_id}, "job")
    n = _limit(limit)
    rows = await run.all_rows(
        conn,
        "read_job_logs_page",
        {
            "project_id": project_id,
            "job_id": job_id,
            "after_id": after_id,
            "execution_seq": execution_seq,
            "limit": n + 1,
        },
    )
    return _page(rows, n, "id")


# ----------------------------------------------------------------------------- workers


def with_loop_stall(worker: dict[str, Any]) -> dict[str, Any]:
    """The worker row with its `loop_stall` JSON's `started_at` read as a datetime (jsonb has no
    time type). A stall is `ongoing` only while its worker lives: one that stopped or died
    mid-stall never reported the end."""
    stall = worker.get("loop_stall")
    if stall:
        stall = dict(stall, started_at=datetime.fromisoformat(stall["started_at"]))
        live = worker.get("status") in (WorkerStatus.ACTIVE, WorkerStatus.DRAINING)
        stall["ongoing"] = bool(stall.get("ongoing")) and live
        worker["loop_stall"] = stall
    return worker


async def list_workers(
    conn: Conn,
    project_id: ProjectId,
    *,
    statuses: Sequence[WorkerStatus] | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> KeysetPage:
    n = _limit(limit)
    rows = await run.all_rows(
        conn,
        "read_workers_page",
        {
            "project_id": project_id,
            "before_id": before_id,
            "statuses": [s.value for s in statuses] if statuses else None,
            "limit": n + 1,
        },
    )
    return _page([with_loop_stall(r) for r in rows], n, "id")


async def get_worker(
    conn: Conn, project_id: ProjectId, worker_id: WorkerId, *, heartbeats: int = RECENT_HEARTBEATS
) -> dict[str, Any]:
    params = {"project_id": project_id, "worker_id": worker_id}
    worker = with_loop_stall(await _required(conn, "read_worker_get", params, "worker"))
    worker["recent_heartbeats"] = await run.all_rows(
        conn, "read_worker_heartbeats", {**params, "limit": _limit(heartbeats)}
    )
    return worker


# ----------------------------------------------------------------------------- dead letters


async def list_dead_letters(
    conn: Conn,
    project_id: ProjectId,
    *,
    queue: str | None = None,
    error_fingerprint: str | None = None,
    replayed: bool | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> KeysetPage:
    """`replayed`: None lists all, False only letters still waiting, True only replayed ones."""
    n = _limit(limit)
    rows = await run.all_rows(
        conn,
        "read_dlq_page",
        {
            "project_id": project_id,
            "before_id": before_id,
            "queue": queue,
            "fingerprint": error_fingerprint,
            "replayed": replayed,
            "limit": n + 1,
        },
    )
    return _page(rows, n, "id")


async def dead_letter_payloads(
    conn: Conn, project_id: ProjectId, dlq_ids: Sequence[int]
) -> dict[int, Any]:
    """The payloads of some dead letters of a project, by id (a page of editors)."""
    rows = await run.all_rows(
        conn, "read_dlq_payloads", {"project_id": project_id, "ids": list(dlq_ids)}
    )
    return {int(r["id"]): r["payload"] for r in rows}


async def get_dead_letter(conn: Conn, project_id: ProjectId, dlq_id: int) -> dict[str, Any]:
    return await _required(
        conn, "read_dlq_get", {"project_id": project_id, "dlq_id": dlq_id}, "dead letter"
    )


# ----------------------------------------------------------------------------- metrics


async def project_metrics(
    conn: Conn, project_id: ProjectId, *, queue: str | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """Depth per queue (claimable and scheduled apart), in flight vs capacity, per-minute
    throughput for the last hour, outcome counts and latency percentiles (optionally one queue).

    Everything about finished runs comes from the scheduler's rollup (core.stats: minute
    buckets), never from `job_executions`: the counts are exact up to the fold's lag (a few
    seconds) and the percentiles are estimated from the histogram buckets."""
    live = await project_live(conn, project_id, queue=queue, now=now)
    queue_id = QueueId(int(live["queues"][0]["id"])) if queue is not None else None
    chart = await stats.series(conn, project_id, window="1h", queue_id=queue_id, now=now)
    t = chart["totals"]
    failed = t["failed"] - t["timed_out"]  # the chart's `failed` includes timeouts
    outcomes = {
        "succeeded": t["succeeded"],
        "failed": failed,
        "timed_out": t["timed_out"],
        "lease_lost": t["lease_lost"],
        "released": t["released"],
        "cancelled": t["cancelled"],
    }
    return {
        "queue": queue,
        "queues": live["queues"],
        "workers": live["workers"],
        "throughput": [
            {"minute": p["t"], "done": p["succeeded"], "failed": p["failed"]}
            for p in chart["points"]
        ],
        "last_hour": {"finished": sum(outcomes.values()), **outcomes},
        "latency_ms": {"run": t["run_ms"], "queue_wait": t["wait_ms"]},
    }


async def project_live(
    conn: Conn, project_id: ProjectId, *, queue: str | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """The live half of project_metrics: depth per queue and worker totals (unfinished jobs and
    live workers only, so its cost follows the backlog, never the history). The dashboard pairs
    it with the rollup (core.stats) for everything about finished runs."""
    base = {"project_id": project_id, "now": sql_now(now)}
    queues = await run.all_rows(conn, "read_metrics_queues", base)
    if queue is not None:
        queues = [q for q in queues if q["name"] == queue]
        if not queues:
            raise NotFound(f"queue {queue!r} does not exist in this project", field="queue")
    workers = await run.one(conn, "read_metrics_workers", base)
    assert workers is not None
    return {
        "queues": queues,
        "workers": {
            "active": workers["active"],
            "draining": workers["draining"],
            "capacity": workers["capacity"],
            "in_flight": workers["in_flight"],
        },
    }


@dataclass(frozen=True)
class ClusterSnapshot:
    """What the Prometheus scrape reports, read in one go at scrape time."""

    queues: list[dict[str, Any]]
    workers: list[dict[str, Any]]


async def cluster_snapshot(conn: Conn, *, now: datetime | None = None) -> ClusterSnapshot:
    """Every project's queues and live workers (for /metrics; not tenant-scoped)."""
    params = {"now": sql_now(now)}
    return ClusterSnapshot(
        queues=await run.all_rows(conn, "read_prom_queues", params),
        workers=await run.all_rows(conn, "read_prom_workers", params),
    )


# ----------------------------------------------------------------------------- schedules


async def list_schedules(
    conn: Conn, project_id: ProjectId, *, after_id: int | None = None, limit: int = 50
) -> KeysetPage:
    n = _limit(limit)
    rows = await run.all_rows(
        conn,
        "read_schedules_page",
        {"project_id": project_id, "after_id": after_id, "limit": n + 1},
    )
    return _page(rows, n, "id")


async def get_schedule(conn: Conn, project_id: ProjectId, schedule_id: int) -> dict[str, Any]:
    return await _required(
        conn,
        "read_schedule_get",
        {"project_id": project_id, "schedule_id": schedule_id},
        "schedule",
    )
