"""Queue and retry-policy management: create, update, pause/resume, delete.

Every function is scoped by project id, so an id from another project behaves as "not found".
Updates take a mapping of only the fields the caller set: a key mapped to None clears the value
(e.g. max_concurrency=None means "unlimited"); a missing key leaves it alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Final

from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.errors import translated
from jobyard.db.pool import Conn
from jobyard.domain.enums import BackoffKind
from jobyard.domain.errors import Conflict, NotFound, ValidationFailed
from jobyard.domain.ids import ProjectId, QueueId

QUEUE_FIELDS: Final = ("priority", "max_concurrency", "retry_policy_id", "default_timeout_ms")
POLICY_FIELDS: Final = (
    "name",
    "backoff",
    "base_delay_ms",
    "max_delay_ms",
    "max_attempts",
    "jitter",
)

# Constraint name → (field, message) for errors a user can cause through these functions.
_CONFLICTS: Final = {
    "queues_project_name_key": ("name", "a queue with this name already exists in this project"),
    "retry_policies_project_name_key": (
        "name",
        "a retry policy with this name already exists in this project",
    ),
}
_CHECKS: Final = {
    "retry_policies_delay_order": ("base_delay_ms", "base_delay_ms must not exceed max_delay_ms"),
}


@asynccontextmanager
async def _named_errors() -> AsyncIterator[None]:
    """Database errors as domain errors that name the field the user must change."""
    try:
        async with translated():
            yield
    except Conflict as exc:
        known = _CONFLICTS.get(str(exc.details.get("constraint", "")))
        if known is None:
            raise
        raise Conflict(known[1], field=known[0]) from exc
    except ValidationFailed as exc:
        known = _CHECKS.get(str(exc.details.get("constraint", "")))
        if known is None:
            raise
        raise ValidationFailed(known[1], field=known[0]) from exc


def _bad_policy() -> NotFound:
    # A reference to nothing is a 404 naming the field, like an unknown queue on enqueue.
    return NotFound(
        "retry_policy_id does not name a retry policy in this project", field="retry_policy_id"
    )


def _changes(fields: tuple[str, ...], changes: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(changes) - set(fields))
    if unknown:
        raise ValidationFailed(f"{unknown[0]} cannot be changed here", field=unknown[0])
    params: dict[str, Any] = {}
    for name in fields:
        params[f"set_{name}"] = name in changes
        value = changes.get(name)
        params[name] = value.value if isinstance(value, BackoffKind) else value
    return params


# ----------------------------------------------------------------------------- queues


async def create_queue(
    conn: Conn,
    project_id: ProjectId,
    *,
    name: str,
    priority: int = 0,
    is_paused: bool = False,
    max_concurrency: int | None = None,
    retry_policy_id: int | None = None,
    default_timeout_ms: int | None = None,
) -> dict[str, Any]:
    params = {
        "project_id": project_id,
        "name": name,
        "priority": priority,
        "is_paused": is_paused,
        "max_concurrency": max_concurrency,
        "retry_policy_id": retry_policy_id,
        "default_timeout_ms": default_timeout_ms,
    }
    async with _named_errors():
        row = await run.one(conn, "queue_create", params)
    if row is None:
        raise _bad_policy()
    return row


async def update_queue(
    conn: Conn,
    project_id: ProjectId,
    queue_id: QueueId,
    changes: Mapping[str, Any],
    *,
    now: datetime | None = None,
) -> dict[str, Any]:
    params = {
        **_changes(QUEUE_FIELDS, changes),
        "project_id": project_id,
        "queue_id": queue_id,
        "now": sql_now(now),
    }
    async with _named_errors():
        row = await run.one(conn, "queue_update", params)
    if row is not None:
        return row
    # No row: either the queue is not this project's, or the policy is not.
    if await run.one(conn, "queue_exists", {"project_id": project_id, "queue_id": queue_id}):
        raise _bad_policy()
    raise NotFound("queue not found")


async def set_queue_paused(
    conn: Conn,
    project_id: ProjectId,
    queue_id: QueueId,
    paused: bool,
    *,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Pause (claims skip the queue from the next claim on) or resume it. Idempotent."""
    row = await run.one(
        conn,
        "queue_set_paused",
        {"project_id": project_id, "queue_id": queue_id, "paused": paused, "now": sql_now(now)},
    )
    if row is None:
        raise NotFound("queue not found")
    return row


async def delete_queue(conn: Conn, project_id: ProjectId, queue_id: QueueId) -> None:
    """Delete a queue with its finished history. Refused (Conflict) while it has unfinished jobs
    or schedules: the cascade would silently drop work someone enqueued or planned."""
    params = {"project_id": project_id, "queue_id": queue_id}
    row = await run.one(conn, "queue_delete", params)
    if row is not None:
        return
    if not await run.one(conn, "queue_exists", params):
        raise NotFound("queue not found")
    blockers = await run.one(conn, "queue_delete_blockers", params)
    assert blockers is not None
    unfinished, schedules = int(blockers["unfinished_jobs"]), int(blockers["schedules"])
    raise Conflict(
        f"queue has {unfinished} unfinished jobs and {schedules} schedules; cancel the jobs or "
        "let them finish, and delete the schedules, first",
        unfinished_jobs=unfinished,
        schedules=schedules,
    )


# ----------------------------------------------------------------------------- retry policies


async def create_policy(
    conn: Conn,
    project_id: ProjectId,
    *,
    name: str,
    backoff: BackoffKind = BackoffKind.EXPONENTIAL,
    base_delay_ms: int = 1000,
    max_delay_ms: int = 3_600_000,
    max_attempts: int = 5,
    jitter: bool = True,
) -> dict[str, Any]:
    params = {
        "project_id": project_id,
        "name": name,
        "backoff": backoff.value,
        "base_delay_ms": base_delay_ms,
        "max_delay_ms": max_delay_ms,
        "max_attempts": max_attempts,
        "jitter": jitter,
    }
    async with _named_errors():
        row = await run.one(conn, "policy_create", params)
    assert row is not None
    return row


async def update_policy(
    conn: Conn, project_id: ProjectId, policy_id: int, changes: Mapping[str, Any]
) -> dict[str, Any]:
    for required in POLICY_FIELDS:  # every policy field is NOT NULL
        if required in changes and changes[required] is None:
            raise ValidationFailed(f"{required} cannot be null", field=required)
    params = {**_changes(POLICY_FIELDS, changes), "project_id": project_id, "policy_id": policy_id}
    try:
        async with _named_errors():
            row = await run.one(conn, "policy_update", params)
    except ValidationFailed as exc:
        if exc.details.get("field") != "base_delay_ms" or {"base_delay_ms", "max_delay_ms"} <= set(
            changes
        ):
            raise
        # Only one of the two delays was sent: the request is valid on its own and conflicts
        # with the policy's stored other delay (409, like any conflict with current state).
        sent = "base_delay_ms" if "base_delay_ms" in changes else "max_delay_ms"
        raise Conflict(
            f"{sent} conflicts with the policy's other delay: base_delay_ms must not exceed "
            "max_delay_ms; send both to change them together",
            field=sent,
        ) from exc
    if row is None:
        raise NotFound("retry policy not found")
    return row


async def delete_policy(conn: Conn, project_id: ProjectId, policy_id: int) -> None:
    """Delete a policy; queues using it fall back to the default retry behaviour."""
    row = await run.one(conn, "policy_delete", {"project_id": project_id, "policy_id": policy_id})
    if row is None:
        raise NotFound("retry policy not found")
