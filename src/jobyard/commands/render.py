"""Plain-text views of jobs for the terminal (no I/O; the commands print the lines)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

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
