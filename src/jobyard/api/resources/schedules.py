"""Cron schedules: list, create, get, update (enable/disable, re-time, …), delete, and a preview
of the next fire times (for any expression, or for a stored schedule).

Validation is core/schedules.py's (one definition for the API, CLI and scheduler): a bad cron
expression names `cron` (and the cron field at fault), an unknown zone names `timezone`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Query, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from pydantic.json_schema import SkipJsonSchema

from jobyard.api.deps import ConnDep, ProjectDep
from jobyard.api.pagination import Page, PageDep
from jobyard.api.resources._shared import Id, IdPath, Text, as_page, keyset_after
from jobyard.api.routes import Route, Scope
from jobyard.core import read_models, schedules
from jobyard.core.cron import MAX_CRON_LENGTH, MAX_TIMEZONE_LENGTH
from jobyard.domain import limits
from jobyard.domain.enums import OverlapPolicy, Role
from jobyard.domain.schemas import HandlerName, Priority, check_payload
from jobyard.domain.text import reject_nul

# No control characters, and at least one that is not white space: core refuses a blank name,
# and Python counts U+001C-U+001F as white space where JSON Schema's regexes do not.
_NAMED = r"^[^\x00-\x1f\x7f]*[^\x00-\x1f\x7f\s][^\x00-\x1f\x7f]*$"
ScheduleName = Annotated[
    str, StringConstraints(min_length=1, max_length=limits.MAX_NAME_LENGTH, pattern=_NAMED)
]
Cron = Annotated[
    Text,
    Field(
        min_length=1,
        max_length=MAX_CRON_LENGTH,
        examples=["*/5 * * * *"],
        description="5 fields (minute hour day-of-month month day-of-week), or 6 with seconds "
        "first.",
        json_schema_extra={"format": "cron"},
    ),
]
Timezone = Annotated[
    Text,
    Field(
        min_length=1,
        max_length=MAX_TIMEZONE_LENGTH,
        examples=["Europe/London"],
        description="An IANA time zone name.",
        json_schema_extra={"format": "iana-timezone"},
    ),
]
PreviewCount = Annotated[int, Query(ge=1, le=schedules.MAX_PREVIEW)]
Attempts = Annotated[int, Field(ge=1, le=limits.MAX_ATTEMPTS_CEILING)]
TimeoutMs = Annotated[int, Field(ge=1, le=86_400_000)]


class ScheduleCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: ScheduleName
    queue_id: Id
    cron: Cron
    timezone: Timezone = "UTC"
    handler: HandlerName
    payload: Any = Field(default_factory=dict)
    priority: Priority = 0
    max_attempts: Attempts | None = None
    timeout_ms: TimeoutMs | None = None
    overlap: OverlapPolicy = Field(
        default=OverlapPolicy.ALLOW,
        description="skip: no new fire while the previous fire's job is unfinished.",
    )
    enabled: bool = True

    _check_payload = field_validator("payload")(check_payload)


class ScheduleUpdate(BaseModel):
    """Only the fields you send change. Changing cron, timezone or enabled recomputes the next
    fire from now (re-enabling does not catch up on missed fires)."""

    model_config = ConfigDict(extra="forbid")

    # Optional; only max_attempts and timeout_ms may be null (cleared), as their columns.
    name: ScheduleName | SkipJsonSchema[None] = None
    queue_id: Id | SkipJsonSchema[None] = None
    cron: Cron | SkipJsonSchema[None] = None
    timezone: Timezone | SkipJsonSchema[None] = None
    handler: HandlerName | SkipJsonSchema[None] = None
    payload: Any = None
    priority: Priority | SkipJsonSchema[None] = None
    max_attempts: Attempts | None = None
    timeout_ms: TimeoutMs | None = None
    overlap: OverlapPolicy | SkipJsonSchema[None] = None
    enabled: bool | SkipJsonSchema[None] = None

    _check_payload = field_validator("payload")(check_payload)


class SchedulePublic(BaseModel):
    id: int
    name: str
    queue_id: int
    queue: str
    cron: str
    timezone: str
    handler: str
    payload: Any
    priority: int
    max_attempts: int | None
    timeout_ms: int | None
    overlap: OverlapPolicy
    enabled: bool
    next_run_at: datetime | None = Field(description="null while disabled.")
    last_fired_at: datetime | None
    last_job_id: int | None
    created_at: datetime
    updated_at: datetime


class SchedulePreview(BaseModel):
    cron: str
    timezone: str
    fire_times: list[datetime] = Field(description="The next fire instants, in UTC.")


async def _public(conn: ConnDep, project: ProjectDep, schedule_id: int) -> SchedulePublic:
    return SchedulePublic.model_validate(
        await read_models.get_schedule(conn, project.project_id, schedule_id)
    )


async def list_schedules(project: ProjectDep, conn: ConnDep, page: PageDep) -> Page[SchedulePublic]:
    result = await read_models.list_schedules(
        conn, project.project_id, after_id=keyset_after(page), limit=page.limit
    )
    return as_page(result, SchedulePublic)


async def create_schedule(
    body: ScheduleCreate, project: ProjectDep, conn: ConnDep
) -> SchedulePublic:
    values = body.model_dump()
    reject_nul(values, "")
    row = await schedules.create_schedule(
        conn, project.project_id, schedules.ScheduleFields.from_mapping(values)
    )
    return await _public(conn, project, row["id"])


async def preview_cron(
    conn: ConnDep,
    project: ProjectDep,
    cron: Annotated[Cron, Query()],
    timezone: Annotated[Timezone, Query()] = "UTC",
    n: PreviewCount = 5,
) -> SchedulePreview:
    """The next `n` fire times of an expression in a zone, before you save it."""
    times = await schedules.preview(conn, cron, timezone, n)
    return SchedulePreview(cron=cron, timezone=timezone, fire_times=times)


async def get_schedule(schedule_id: IdPath, project: ProjectDep, conn: ConnDep) -> SchedulePublic:
    return await _public(conn, project, schedule_id)


async def preview_schedule(
    schedule_id: IdPath, project: ProjectDep, conn: ConnDep, n: PreviewCount = 5
) -> SchedulePreview:
    """The next `n` fire times of a stored schedule (whether or not it is enabled)."""
    row = await read_models.get_schedule(conn, project.project_id, schedule_id)
    times = await schedules.preview(conn, row["cron"], row["timezone"], n)
    return SchedulePreview(cron=row["cron"], timezone=row["timezone"], fire_times=times)


async def update_schedule(
    schedule_id: IdPath, body: ScheduleUpdate, project: ProjectDep, conn: ConnDep
) -> SchedulePublic:
    changes: dict[str, Any] = body.model_dump(include=body.model_fields_set)
    reject_nul(changes, "")
    # A 404 for a path id names nothing (core's names the field, which would tell an id apart).
    await read_models.get_schedule(conn, project.project_id, schedule_id)
    await schedules.update_schedule(conn, project.project_id, schedule_id, changes)
    return await _public(conn, project, schedule_id)


async def delete_schedule(schedule_id: IdPath, project: ProjectDep, conn: ConnDep) -> Response:
    """Delete a schedule; jobs it already fired keep running and keep their history."""
    await read_models.get_schedule(conn, project.project_id, schedule_id)  # a bare 404
    await schedules.delete_schedule(conn, project.project_id, schedule_id)
    return Response(status_code=204)


TAGS = ("schedules",)
BASE = "/projects/{project_id}/schedules"
ROUTES: tuple[Route, ...] = (
    Route("GET", BASE, Scope.PROJECT, list_schedules, min_role=Role.VIEWER,
          summary="List schedules", response_model=Page[SchedulePublic], tags=TAGS),
    Route("POST", BASE, Scope.PROJECT, create_schedule, min_role=Role.ADMIN, status_code=201,
          summary="Create a schedule", response_model=SchedulePublic, tags=TAGS,
          responses={409: "the name is taken"}),
    # Before /{schedule_id}: routes match in order, and "preview" is not an id.
    Route("GET", BASE + "/preview", Scope.PROJECT, preview_cron, min_role=Role.VIEWER,
          summary="Preview the next fire times of a cron expression",
          response_model=SchedulePreview, tags=TAGS, operation_id="schedules_preview_cron"),
    Route("GET", BASE + "/{schedule_id}", Scope.PROJECT, get_schedule, min_role=Role.VIEWER,
          summary="Get a schedule", response_model=SchedulePublic, tags=TAGS),
    Route("GET", BASE + "/{schedule_id}/preview", Scope.PROJECT, preview_schedule,
          min_role=Role.VIEWER, summary="Preview a schedule's next fire times",
          response_model=SchedulePreview, tags=TAGS),
    Route("PATCH", BASE + "/{schedule_id}", Scope.PROJECT, update_schedule, min_role=Role.ADMIN,
          summary="Update a schedule", response_model=SchedulePublic, tags=TAGS,
          responses={409: "the name is taken"}),
    Route("DELETE", BASE + "/{schedule_id}", Scope.PROJECT, delete_schedule,
          min_role=Role.ADMIN, status_code=204, summary="Delete a schedule", tags=TAGS),
)  # fmt: skip
