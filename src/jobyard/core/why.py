""" "Why isn't this job running?": the reasons a job is where it is, each with a code, a sentence
and (where one exists) the time it ends.

One read of the job with its queue, slots and workers (`why_job_context`), plus the parents, slot
holders or place in line when they matter. Pure reads: nothing here changes a job.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from jobyard.core.actions import cancelled_by_dependency
from jobyard.core.clock import sql_now
from jobyard.core.worker_views import stall_place
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.enums import JobStatus
from jobyard.domain.errors import NotFound
from jobyard.domain.ids import JobId, ProjectId

# A worker silent for this many heartbeat intervals is not counted as live (the sweeper declares
# it dead much later; by then its leases have long expired).
STALE_HEARTBEATS: Final = 3
DEFAULT_HEARTBEAT_S: Final = 5.0
DEFAULT_REAPER_S: Final = 10.0
POSITION_CAP: Final = 10_000
HOLDERS_SHOWN: Final = 10
PARENTS_SHOWN: Final = 50
DRAIN_WINDOW_MIN: Final = 5
# The scheduler's promoter moves due jobs to the queue about once a second
# (JOBYARD_PROMOTER_INTERVAL_S); one due for longer than this was not moved by any.
PROMOTION_OVERDUE_S: Final = 30.0


@dataclass(frozen=True)
class Reason:
    code: str
    sentence: str
    ends_at: datetime | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Explanation:
    job_id: int
    status: JobStatus
    reasons: list[Reason]
    at: datetime  # the database time the answer describes


def _at(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


async def explain(
    conn: Conn,
    project_id: ProjectId,
    job_id: JobId,
    *,
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_S,
    reaper_interval_s: float = DEFAULT_REAPER_S,
    now: datetime | None = None,
) -> Explanation:
    """Why the job is in its state; NotFound if it is not this project's."""
    stale_s = STALE_HEARTBEATS * heartbeat_interval_s
    row = await run.one(
        conn,
        "why_job_context",
        {"project_id": project_id, "job_id": job_id, "now": sql_now(now), "stale_s": stale_s},
    )
    if row is None:
        raise NotFound("job not found")
    at: datetime = row["now"]
    status = JobStatus(row["status"])
    reasons: list[Reason] = []
    if status is JobStatus.WAITING:
        reasons += await _waiting(conn, row)
    elif status is JobStatus.SCHEDULED:
        reasons += _scheduled(row, at)
    elif status is JobStatus.QUEUED:
        reasons += await _queued(conn, row, at)
    elif status in (JobStatus.CLAIMED, JobStatus.RUNNING):
        reasons.append(_held(row, at, stale_s, reaper_interval_s))
    else:
        reasons.append(_finished(row, status))
    if status in (JobStatus.WAITING, JobStatus.SCHEDULED, JobStatus.QUEUED):
        # Whatever else holds it, a job also needs a worker once it becomes claimable.
        reasons += _workers(row, at)
        reasons += await _worker_health(conn, row, at)
    return Explanation(job_id=int(row["id"]), status=status, reasons=reasons, at=at)


async def _waiting(conn: Conn, row: dict[str, Any]) -> list[Reason]:
    parents = await run.all_rows(conn, "why_parents", {"job_id": row["id"], "limit": PARENTS_SHOWN})
    pending = [p for p in parents if p["status"] != JobStatus.DONE]
    listed = ", ".join(f"#{p['id']} {p['status']}" for p in pending) or "none"
    return [
        Reason(
            "waiting_on_parents",
            f"Waiting for {len(pending)} of {len(parents)} parent job(s) to finish: {listed}.",
            details={
                "parents": [
                    {"id": p["id"], "status": p["status"], "handler": p["handler"]} for p in parents
                ]
            },
        )
    ]


def _scheduled(row: dict[str, Any], at: datetime) -> list[Reason]:
    run_at: datetime = row["run_at"]
    reasons = [_backoff(row, run_at, at) if _failed_before(row) else _due_or_not(run_at, at)]
    overdue_s = (at - run_at).total_seconds()
    if overdue_s > PROMOTION_OVERDUE_S:
        reasons.append(
            Reason(
                "promotion_overdue",
                f"Due for {_span(overdue_s)} and still not moved to the queue, which the "
                "scheduler's promoter does about once a second: is a `jobyard scheduler` "
                "process running against this database? (Or it is far behind.)",
                details={"overdue_s": round(overdue_s)},
            )
        )
    return reasons


def _failed_before(row: dict[str, Any]) -> bool:
    return bool(row["attempt"] > 0 and (row["last_error"] or row["last_run_error"]))


def _backoff(row: dict[str, Any], run_at: datetime, at: datetime) -> Reason:
    error = row["last_error"] or row["last_run_error"]
    when = (
        f"is due since {_at(run_at)} (the scheduler's promoter moves it to the queue within "
        "seconds)"
        if run_at <= at
        else f"runs at {_at(run_at)} (in {_span((run_at - at).total_seconds())})"
    )
    return Reason(
        "retry_backoff",
        f"Backing off after attempt {row['attempt']} of {row['max_attempts']} failed with "
        f"{error!r}; retry {row['attempt'] + 1} of {row['max_attempts']} {when}.",
        # Once due, the wait is the promoter's, which has no known end.
        ends_at=run_at if run_at > at else None,
        details={
            "attempt": row["attempt"],
            "max_attempts": row["max_attempts"],
            "next_attempt": row["attempt"] + 1,
            "error": error,
        },
    )


def _due_or_not(run_at: datetime, at: datetime) -> Reason:
    if run_at <= at:
        return Reason(
            "scheduled_due",
            f"Due since {_at(run_at)}; the scheduler's promoter moves it to the queue within "
            "seconds (is a `jobyard scheduler` process running?).",
        )
    return Reason(
        "scheduled",
        f"Scheduled to run at {_at(run_at)} (in {_span((run_at - at).total_seconds())}).",
        ends_at=run_at,
    )


async def _queued(conn: Conn, row: dict[str, Any], at: datetime) -> list[Reason]:
    reasons: list[Reason] = []
    if row["is_paused"]:
        reasons.append(
            Reason(
                "queue_paused",
                f"Queue {row['queue']!r} is paused: workers claim nothing from it until it is "
                "resumed.",
                details={"queue": row["queue"]},
            )
        )
    limit = row["max_concurrency"]
    if limit is not None and row["in_flight"] >= limit:
        holders = await run.all_rows(
            conn, "why_slot_holders", {"queue_id": row["queue_id"], "limit": HOLDERS_SHOWN}
        )
        ids = ", ".join(f"#{h['id']}" for h in holders)
        reasons.append(
            Reason(
                "concurrency_limit",
                f"Queue {row['queue']!r} is at its concurrency limit ({row['in_flight']} of "
                f"{limit} slots held, by {ids}).",
                details={
                    "limit": limit,
                    "in_flight": row["in_flight"],
                    "holders": [
                        {"id": h["id"], "worker_id": h["worker_id"], "status": h["status"]}
                        for h in holders
                    ],
                },
            )
        )
    pos = await run.one(
        conn,
        "why_position",
        {
            "queue_id": row["queue_id"],
            "priority": row["priority"],
            "run_at": row["run_at"],
            "job_id": row["id"],
            "cap": POSITION_CAP,
            "now": at,
        },
    )
    assert pos is not None
    ahead = int(pos["ahead"])
    per_min = int(pos["finished_5m"]) / DRAIN_WINDOW_MIN
    capped = ahead >= POSITION_CAP
    # A paused queue drains nothing, whatever it finished before the pause.
    paused = bool(row["is_paused"])
    eta = at + timedelta(minutes=(ahead + 1) / per_min) if per_min > 0 and not paused else None
    line = f"{ahead}{'+' if capped else ''} job(s) ahead of it in {row['queue']!r}"
    if eta is not None:
        drain = f"the queue drains {per_min:g} jobs/min, so it should start by about {_at(eta)}"
    elif paused:
        drain = "no ETA while the queue is paused"
    else:
        drain = f"no job of this queue finished in the last {DRAIN_WINDOW_MIN} min, so no ETA"
    reasons.append(
        Reason(
            "position",
            f"{line} (by priority, then run_at); {drain}.",
            ends_at=eta,
            details={"ahead": ahead, "capped": capped, "drain_per_min": per_min},
        )
    )
    return reasons


def _workers(row: dict[str, Any], at: datetime) -> list[Reason]:
    if row["live_workers"] == 0:
        seen = row["queue_last_seen_at"]
        when = f"one was last seen at {_at(seen)}" if seen else "none has ever listened to it"
        return [
            Reason(
                "no_live_worker",
                f"No live worker listens to queue {row['queue']!r}; {when}.",
                details={"queue": row["queue"], "last_seen_at": seen},
            )
        ]
    if row["live_handler_workers"] == 0:
        return [
            Reason(
                "no_handler",
                f"{row['live_workers']} live worker(s) listen to queue {row['queue']!r}, but "
                f"none has a handler named {row['handler']!r} registered.",
                details={"handler": row["handler"], "live_workers": row["live_workers"]},
            )
        ]
    return []


async def _worker_health(conn: Conn, row: dict[str, Any], at: datetime) -> list[Reason]:
    """Workers of the queue that claim less than they seem to: paused by an operator, an event
    loop a handler blocks (no claim, no heartbeat), or threads a handler kept past its run (each
    holds a slot)."""
    sick = await run.all_rows(
        conn,
        "why_worker_health",
        {"project_id": row["project_id"], "queue": row["queue"], "limit": HOLDERS_SHOWN},
    )
    reasons: list[Reason] = []
    for w in sick:
        worker = f"Worker {w['name']!r} (#{w['id']})"
        if w["paused_at"] is not None:
            by = w["paused_by"] or "an operator"
            reasons.append(
                Reason(
                    "worker_paused",
                    f"{worker} listens to queue {row['queue']!r}, but {by} paused it at "
                    f"{_at(w['paused_at'])}: it claims nothing until resumed.",
                    details={
                        "worker_id": w["id"],
                        "paused_at": w["paused_at"],
                        "paused_by": w["paused_by"],
                    },
                )
            )
        stall = w["loop_stall"]
        if stall is not None and stall.get("ongoing"):
            reasons.append(
                Reason(
                    "worker_loop_blocked",
                    f"{worker} listens to queue {row['queue']!r}, but its event loop "
                    f"{_stall_words(stall, at)}: it claims nothing until that returns.",
                    details={"worker_id": w["id"], "loop_stall": stall},
                )
            )
        if w["orphan_threads"] > 0:
            reasons.append(
                Reason(
                    "worker_orphan_threads",
                    f"{worker} listens to queue {row['queue']!r}, but {w['orphan_threads']} of "
                    f"its {w['concurrency']} slots are held by handler threads still running "
                    "after their run ended (a timeout or cancel the handler ignores): it claims "
                    "that many fewer jobs until they return.",
                    details={
                        "worker_id": w["id"],
                        "orphan_threads": w["orphan_threads"],
                        "concurrency": w["concurrency"],
                    },
                )
            )
    return reasons


def _stall_words(stall: dict[str, Any], at: datetime) -> str:
    """'has stood still for 40 s (since …), blocked by handler 'resize' (job #4) at f.py:3 in
    resize'."""
    since = datetime.fromisoformat(stall["started_at"])
    return (
        f"has stood still for {_span((at - since).total_seconds())} (since {_at(since)}), "
        f"blocked {stall_place(stall)}"
    )


def _held(row: dict[str, Any], at: datetime, stale_s: float, reaper_s: float) -> Reason:
    beat: datetime | None = row["holder_heartbeat_at"]
    expires: datetime = row["lock_expires_at"]
    worker = f"worker {row['holder_name']!r} (#{row['worker_id']})"
    silent = beat is None or (at - beat).total_seconds() > stale_s or row["holder_status"] == "dead"
    if silent:
        acts = expires + timedelta(seconds=reaper_s)
        since = f"since {_at(beat)}" if beat else "ever"
        lease = (
            f"its lease expires at {_at(expires)} and the reaper requeues it by about {_at(acts)}"
            if expires > at
            else f"its lease expired at {_at(expires)}; the reaper requeues it by about {_at(acts)}"
        )
        stall = _holder_stall(row)
        if stall is not None:
            # The heartbeat runs on the loop a handler blocks: name the handler, not a crash.
            since += f", because its event loop {_stall_words(stall, at)}"
        return Reason(
            "holder_silent",
            f"Held by {worker}, which has not heartbeated {since}: {lease}.",
            ends_at=acts,
            details={"worker_id": row["worker_id"], "last_heartbeat_at": beat,
                     "lock_expires_at": expires, "loop_stall": stall},
        )  # fmt: skip
    if row["cancel_requested_at"] is not None:
        return Reason(
            "cancel_requested",
            f"Cancel requested; {worker} is stopping it.",
            details={"worker_id": row["worker_id"]},
        )
    stall = _holder_stall(row)
    # Heard from lately, but its loop stands still now: the heartbeat that follows will be late.
    blocked = f"; its event loop {_stall_words(stall, at)}" if stall else ""
    return Reason(
        "running",
        f"Running on {worker} (attempt {row['attempt']} of {row['max_attempts']}){blocked}.",
        details={"worker_id": row["worker_id"], "loop_stall": stall},
    )


def _holder_stall(row: dict[str, Any]) -> dict[str, Any] | None:
    """The holding worker's event-loop stall, if one is going on (a dead worker's is over)."""
    stall: dict[str, Any] | None = row["holder_loop_stall"]
    if stall and stall.get("ongoing") and row["holder_status"] not in ("dead", "stopped"):
        return stall
    return None


def _finished(row: dict[str, Any], status: JobStatus) -> Reason:
    if status is JobStatus.DONE:
        return Reason("finished", "Finished successfully.")
    if status is JobStatus.DEAD_LETTER:
        return Reason(
            "dead_lettered",
            f"Dead-lettered after {row['attempt']} of {row['max_attempts']} attempts "
            f"({row['last_error'] or 'no error recorded'}); retry it to queue it again.",
        )
    if status is JobStatus.CANCELLED:
        return _cancelled(row["cancel_reason"])
    return Reason("failed", f"Failed ({row['last_error']}); about to be retried or dead-lettered.")


def _cancelled(cancel_reason: str | None) -> Reason:
    details = {"cancel_reason": cancel_reason}
    if cancelled_by_dependency(cancel_reason):
        return Reason(
            "cancelled",
            f"Cancelled because a parent failed ({cancel_reason}); retry that parent and this "
            "job waits for it again.",
            details=details,
        )
    because = f" ({cancel_reason})" if cancel_reason else ""
    return Reason("cancelled", f"Cancelled{because}; retry it to queue it again.", details=details)
