"""Cron schedules (`scheduled_jobs`): validate, create, update, delete, and materialize due fires.

Materialization (engine rule 8) is safe with any number of scheduler replicas and no leader:

1. In one transaction, lock up to `batch` due, enabled schedules with `FOR UPDATE SKIP LOCKED`
   (a replica never waits for, nor sees, a row another replica is firing).
2. For each, compute the next fire in Python (cron needs a library) strictly after
   `max(database now, this fire time)` — so a schedule that missed runs (scheduler down, a
   long pause) fires **once** for the missed period, and the next fire is in the future.
3. Insert the job with idempotency key `cron:<schedule id>:<fire time in UTC>` and
   `ON CONFLICT DO NOTHING`, and advance `next_run_at`, `last_fired_at`, `last_job_id` in the same
   statement. Two replicas can never enqueue the same fire: the row lock serializes them, and the
   key would refuse a second insert even if `next_run_at` were rewound.

Overlap policy `skip`: a fire is skipped (next_run_at advances, no job, nothing recorded) while the
job of the previous fire is not terminal — queued, claimed, running, failed or scheduled for a
retry all count as "still running". A pruned previous job (NULL) does not block.

Only the database clock decides due-ness: `now` comes from PostgreSQL (or a test's injected
`now`); the host clock is never read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, cast

from jobyard.core.clock import sql_now
from jobyard.core.cron import CronSpec, next_fire, next_fires, parse_cron
from jobyard.core.maintenance import db_now
from jobyard.db import run
from jobyard.db.errors import translated
from jobyard.db.json import jsonb
from jobyard.db.pool import Conn
from jobyard.domain import limits
from jobyard.domain.enums import JobStatus, OverlapPolicy
from jobyard.domain.errors import Conflict, NotFound, ValidationFailed
from jobyard.domain.ids import JobId, ProjectId, ScheduleId
from jobyard.domain.lifecycle import TERMINAL
from jobyard.domain.schemas import payload_size
from jobyard.logs import get_logger

log = get_logger("jobyard.core.schedules")

MAX_TIMEOUT_MS = 86_400_000
MAX_PREVIEW = 100


def _need_int(name: str, value: object, lo: int, hi: int, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    # bool is an int in Python; a schedule's priority of `true` is a mistake, not 1.
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValidationFailed(f"{name}: must be an integer from {lo} to {hi}", field=name)


def _need_text(name: str, value: object, max_len: int) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > max_len:
        raise ValidationFailed(f"{name}: must be 1 to {max_len} characters", field=name)


@dataclass(frozen=True)
class ScheduleFields:
    """Every editable field of a schedule, validated on construction (errors name the field)."""

    name: str
    queue_id: int
    cron: str
    handler: str
    timezone: str = "UTC"
    payload: Any = field(default_factory=dict)
    priority: int = 0
    max_attempts: int | None = None
    timeout_ms: int | None = None
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    enabled: bool = True

    def __post_init__(self) -> None:
        _need_text("name", self.name, limits.MAX_NAME_LENGTH)
        _need_int("queue_id", self.queue_id, 1, 2**63 - 1)
        _need_text("handler", self.handler, limits.MAX_HANDLER_LENGTH)
        spec = parse_cron(self.cron, self.timezone)  # names "cron" or "timezone"
        object.__setattr__(self, "cron", spec.expr)
        try:
            size = payload_size(self.payload)
        except (TypeError, ValueError):
            raise ValidationFailed("payload: must be JSON", field="payload") from None
        if size > limits.MAX_PAYLOAD_BYTES:
            raise ValidationFailed(
                f"payload: larger than {limits.MAX_PAYLOAD_BYTES // 1024} KB", field="payload"
            )
        _need_int("priority", self.priority, limits.MIN_PRIORITY, limits.MAX_PRIORITY)
        _need_int("max_attempts", self.max_attempts, 1, limits.MAX_ATTEMPTS_CEILING, optional=True)
        _need_int("timeout_ms", self.timeout_ms, 1, MAX_TIMEOUT_MS, optional=True)
        try:
            object.__setattr__(self, "overlap", OverlapPolicy(self.overlap))
        except ValueError:
            allowed = ", ".join(repr(p.value) for p in OverlapPolicy)
            raise ValidationFailed(f"overlap: must be one of {allowed}", field="overlap") from None
        if not isinstance(self.enabled, bool):
            raise ValidationFailed("enabled: must be true or false", field="enabled")

    @property
    def spec(self) -> CronSpec:
        return parse_cron(self.cron, self.timezone)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> ScheduleFields:
        """Build from a plain mapping (an API body); unknown or missing keys name the field."""
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                raise ValidationFailed(f"{key}: not a schedule field", field=key)
        for required in ("name", "queue_id", "cron", "handler"):
            if required not in values:
                raise ValidationFailed(f"{required}: required", field=required)
        get = values.get
        # The casts only satisfy the type checker: __post_init__ checks every value.
        return cls(
            name=cast(str, get("name")),
            queue_id=cast(int, get("queue_id")),
            cron=cast(str, get("cron")),
            handler=cast(str, get("handler")),
            timezone=cast(str, get("timezone", "UTC")),
            payload=get("payload", {}),
            priority=cast(int, get("priority", 0)),
            max_attempts=cast("int | None", get("max_attempts")),
            timeout_ms=cast("int | None", get("timeout_ms")),
            overlap=cast(OverlapPolicy, get("overlap", OverlapPolicy.ALLOW)),
            enabled=cast(bool, get("enabled", True)),
        )


@dataclass(frozen=True)
class MaterializeResult:
    """What one materialization transaction did. `more`: the batch was full, go again."""

    fired: int = 0
    skipped_overlap: int = 0
    duplicates: int = 0
    parked: int = 0
    locked: int = 0
    more: bool = False
    job_ids: tuple[JobId, ...] = ()


def idempotency_key(schedule_id: int, fire_at: datetime) -> str:
    """The key that makes one fire one job: `cron:<schedule id>:<fire time, UTC, ISO 8601>`.

    >>> idempotency_key(7, datetime(2026, 3, 8, 7, 0, tzinfo=UTC))
    'cron:7:2026-03-08T07:00:00Z'
    """
    utc = fire_at.astimezone(UTC)
    stamp = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        stamp += f".{utc.microsecond:06d}"
    return f"cron:{schedule_id}:{stamp}Z"


def _first_fire(values: ScheduleFields, now: datetime) -> datetime | None:
    if not values.enabled:
        return None
    return next_fire(values.spec, now)


def _params(values: ScheduleFields) -> dict[str, Any]:
    return {
        "name": values.name,
        "queue_id": values.queue_id,
        "cron": values.cron,
        "timezone": values.timezone,
        "handler": values.handler,
        "payload": jsonb(values.payload),
        "priority": values.priority,
        "max_attempts": values.max_attempts,
        "timeout_ms": values.timeout_ms,
        "overlap": values.overlap.value,
        "enabled": values.enabled,
    }


def _name_taken(exc: Conflict, name: str) -> Conflict:
    if exc.details.get("constraint") == "scheduled_jobs_project_name_key":
        # Worded to read whole without the name: the API withholds submitted values.
        return Conflict("name: a schedule with this name already exists", field="name")
    return exc


async def create_schedule(
    conn: Conn, project_id: ProjectId, values: ScheduleFields, *, now: datetime | None = None
) -> dict[str, Any]:
    """Insert a schedule; its first fire is the next occurrence after the database's now."""
    current = await db_now(conn, now)
    params = {
        **_params(values),
        "project_id": project_id,
        "next_run_at": _first_fire(values, current),
        "now": sql_now(now),
    }
    try:
        async with translated():
            row = await run.one(conn, "schedule_insert", params)
    except Conflict as exc:
        raise _name_taken(exc, values.name) from exc
    if row is None:
        raise NotFound("queue_id: no such queue in this project", field="queue_id")
    return row


async def get_schedule(conn: Conn, project_id: ProjectId, schedule_id: int) -> dict[str, Any]:
    row = await run.one(conn, "schedule_get", {"id": schedule_id, "project_id": project_id})
    if row is None:
        raise NotFound("schedule not found", field="schedule_id")
    return row


async def update_schedule(
    conn: Conn,
    project_id: ProjectId,
    schedule_id: int,
    changes: Mapping[str, object],
    *,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Apply a partial update (keys are ScheduleFields names). Changing cron, timezone or
    enabled recomputes next_run_at from the database's now; re-enabling does not catch up."""
    async with conn.transaction():
        row = await run.one(conn, "schedule_lock", {"id": schedule_id, "project_id": project_id})
        if row is None:
            raise NotFound("schedule not found", field="schedule_id")
        # The stored row is not re-validated on its own: a parked (invalid) schedule must
        # still accept the change that fixes it. The merged result is validated as a whole.
        stored = {f.name: row[f.name] for f in fields(ScheduleFields)}
        after = ScheduleFields.from_mapping({**stored, **changes})
        next_run_at = row["next_run_at"]
        retimed = (after.cron, after.timezone, after.enabled) != (
            stored["cron"],
            stored["timezone"],
            stored["enabled"],
        )
        if retimed or (after.enabled and next_run_at is None):
            next_run_at = _first_fire(after, await db_now(conn, now))
        params = {
            **_params(after),
            "id": schedule_id,
            "project_id": project_id,
            "next_run_at": next_run_at,
            "now": sql_now(now),
        }
        try:
            async with translated():
                updated = await run.one(conn, "schedule_update", params)
        except Conflict as exc:
            raise _name_taken(exc, after.name) from exc
    if updated is None:
        raise NotFound("queue_id: no such queue in this project", field="queue_id")
    return updated


async def delete_schedule(conn: Conn, project_id: ProjectId, schedule_id: int) -> None:
    row = await run.one(conn, "schedule_delete", {"id": schedule_id, "project_id": project_id})
    if row is None:
        raise NotFound("schedule not found", field="schedule_id")


async def preview(
    conn: Conn,
    cron: str,
    timezone: str,
    n: int = 5,
    *,
    seconds: bool | None = None,
    now: datetime | None = None,
) -> list[datetime]:
    """The next `n` fire instants (UTC) after the database's now, for the API's preview."""
    if not 1 <= n <= MAX_PREVIEW:
        raise ValidationFailed(f"n: must be from 1 to {MAX_PREVIEW}", field="n")
    spec = parse_cron(cron, timezone, seconds=seconds)
    return next_fires(spec, await db_now(conn, now), n)


async def seconds_until_next_due(conn: Conn, *, now: datetime | None = None) -> float | None:
    """Seconds until the earliest enabled schedule is due (<= 0 when overdue; None if none)."""
    row = await run.one(conn, "schedule_next_due", {"now": sql_now(now)})
    if row is None or row["seconds"] is None:
        return None
    return float(row["seconds"])


async def materialize_due(
    conn: Conn, *, batch: int = 100, now: datetime | None = None
) -> MaterializeResult:
    """Fire every due schedule (up to `batch`) in one transaction; see the module docstring."""
    fired = skipped = duplicates = parked = 0
    job_ids: list[JobId] = []
    async with conn.transaction():
        rows = await run.all_rows(conn, "schedule_lock_due", {"batch": batch, "now": sql_now(now)})
        for row in rows:
            schedule_id = ScheduleId(row["id"])
            fire_at: datetime = row["next_run_at"]
            try:
                spec = parse_cron(row["cron"], row["timezone"])
                # Strictly after max(now, fire time): a missed period fires once, not per miss.
                following: datetime | None = next_fire(spec, max(row["db_now"], fire_at))
            except ValidationFailed as exc:
                # Stored by hand or made invalid by a tzdata/cronsim change: park it (NULL
                # next_run_at) instead of failing every pass. Updating the schedule revives it.
                log.error("schedule parked", schedule_id=schedule_id, reason=exc.message)
                await _advance(conn, schedule_id, None, now)
                parked += 1
                continue
            last_status = row["last_job_status"]
            if (
                row["overlap"] == OverlapPolicy.SKIP.value
                and last_status is not None
                and JobStatus(last_status) not in TERMINAL
            ):
                await _advance(conn, schedule_id, following, now)
                skipped += 1
                continue
            result = await run.one(
                conn,
                "schedule_fire",
                {
                    "schedule_id": schedule_id,
                    "fire_at": fire_at,
                    "next_run_at": following,
                    "idempotency_key": idempotency_key(schedule_id, fire_at),
                    "now": sql_now(now),
                },
            )
            assert result is not None
            if result["created"]:
                fired += 1
                job_ids.append(JobId(result["job_id"]))
            else:
                duplicates += 1
    return MaterializeResult(
        fired=fired,
        skipped_overlap=skipped,
        duplicates=duplicates,
        parked=parked,
        locked=len(rows),
        more=len(rows) >= batch,
        job_ids=tuple(job_ids),
    )


async def _advance(
    conn: Conn, schedule_id: int, next_run_at: datetime | None, now: datetime | None
) -> None:
    await run.execute(
        conn,
        "schedule_advance",
        {"schedule_id": schedule_id, "next_run_at": next_run_at, "now": sql_now(now)},
    )


async def trigger_now(
    conn: Conn, project_id: ProjectId, schedule_id: int, *, now: datetime | None = None
) -> JobId:
    """Fire a schedule once, now, by hand (its cron timing is left as it is); the new job's id."""
    async with translated():
        row = await run.one(
            conn,
            "schedule_trigger",
            {"schedule_id": schedule_id, "project_id": project_id, "now": sql_now(now)},
        )
    if row is None:
        raise NotFound("schedule not found")
    return JobId(row["job_id"])
