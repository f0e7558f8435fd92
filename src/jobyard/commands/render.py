"""Plain-text views of jobs for the terminal (no I/O; the commands print the lines)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from jobyard.core.worker_views import health_words, stall_place

INDENT = "    "


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def when(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S}"


def job_detail(
    job: dict[str, Any], runs: list[dict[str, Any]], logs: list[dict[str, Any]], log_limit: int
) -> Iterator[str]:
    yield f"job {job['id']}  {job['handler']}  on queue {job['queue']}  — {job['status']}"
    yield (
        f"  attempt {job['attempt']}/{job['max_attempts']}  priority {job['priority']}  "
        f"run_at {when(job['run_at'])}  created {when(job['created_at'])}  "
        f"finished {when(job.get('finished_at'))}"
    )
    if job.get("idempotency_key"):
        yield f"  idempotency key {job['idempotency_key']}"
    if job.get("cancel_requested_at") and job["status"] != "cancelled":
        yield f"  cancel requested at {when(job['cancel_requested_at'])}"
    yield f"  payload {json.dumps(job['payload'], sort_keys=True)}"
    if job.get("result") is not None:
        yield f"  result  {json.dumps(job['result'], sort_keys=True)}"
    if job.get("last_error"):
        yield f"  last error: {job['last_error']}"
    yield f"runs ({len(runs)}):" if runs else "runs: none yet"
    for run in runs:
        outcome = run.get("outcome") or "in flight"
        took = "" if run.get("duration_ms") is None else f"  {run['duration_ms']} ms"
        worker = "" if run.get("worker_id") is None else f"  worker {run['worker_id']}"
        yield (
            f"  #{run['execution_seq']} attempt {run['attempt']}  {outcome}{took}{worker}  "
            f"started {when(run.get('started_at'))}"
        )
        if run.get("error"):
            yield f"{INDENT}error: {run['error']}"
        # The traceback column exists once the SDK's migration is in (job_executions.traceback).
        trace = run.get("traceback")
        if trace:
            yield f"{INDENT}traceback:"
            for line in str(trace).rstrip().splitlines():
                yield f"{INDENT}  {line}"
    if log_limit == 0:
        return
    yield f"logs ({len(logs)}{'+' if len(logs) >= log_limit else ''}):" if logs else "logs: none"
    for entry in logs:
        fields = entry.get("fields") or {}
        extra = f"  {json.dumps(fields, sort_keys=True)}" if fields else ""
        yield (
            f"  {when(entry['created_at'])}  run {entry['execution_seq']}  "
            f"{entry['level']:<7} {entry['message']}{extra}"
        )


def worker_health_summary(worker: dict[str, Any]) -> str:
    """One cell: what is wrong with a worker now, or "ok"."""
    return "; ".join(health_words(worker)) or "ok"


def loop_stall_words(stall: dict[str, Any], stalls: int) -> str:
    where = stall_place(stall)
    count = f"{stalls} stall{'' if stalls == 1 else 's'} since it started"
    if stall["ongoing"]:
        return f"BLOCKED since {when(stall['started_at'])} {where} ({count})"
    return (
        f"last stood still {stall['blocked_s']} s at {when(stall['started_at'])} {where} ({count})"
    )


def worker_detail(worker: dict[str, Any]) -> Iterator[str]:
    where = f"{worker['hostname'] or '-'}:{worker['pid'] or '-'}"
    yield f"worker {worker['id']}  {worker['name']}  on {where}  — {worker['status']}"
    yield (
        f"  queues {', '.join(worker['queues'])}  "
        f"in flight {worker['in_flight']}/{worker['capacity']}"
    )
    yield (
        f"  started {when(worker['started_at'])}  "
        f"last heartbeat {when(worker['last_heartbeat_at'])}  "
        f"stopped {when(worker.get('stopped_at'))}"
    )
    if worker.get("paused_at") and worker["status"] in ("active", "draining"):
        paused = when(worker["paused_at"])
        by = worker.get("paused_by") or "an operator"
        yield f"  PAUSED by {by} at {paused}: claims nothing until resumed"
    stall = worker.get("loop_stall")
    loop = (
        loop_stall_words(stall, worker["loop_stalls"])
        if stall
        else "never stood still past its threshold"
    )
    yield f"  event loop: {loop}"
    orphans = worker.get("orphan_threads") or 0
    yield (
        f"  orphan threads: {orphans} handler thread(s) still running after their run ended, "
        f"holding {orphans} of {worker['capacity']} slots"
        if orphans
        else "  orphan threads: none"
    )
    if stall and stall["ongoing"]:
        yield (
            f"{INDENT}an async def handler blocks the loop: no other job, heartbeat or claim "
            "runs; move the blocking call into a plain def handler (a thread) or await an async "
            "client"
        )
    if orphans:
        yield (
            f"{INDENT}a handler ignored its timeout or a cancel: check ctx.is_cancelled() in "
            "long loops"
        )
    beats = worker.get("recent_heartbeats") or []
    yield f"recent heartbeats ({len(beats)}):" if beats else "recent heartbeats: none"
    for b in beats:
        yield f"  {when(b['beat_at'])}  in flight {b['in_flight']}/{b['capacity']}"
