"""The dead-letter queue: jobs that ran out of attempts (or kept killing their workers). List
(filter by queue and error fingerprint), get, edit the payload, replay as a new job, delete.

Replaying enqueues a NEW job (202, with that job) and links it from the dead letter; the dead
letter stays until deleted, so its history is never lost by a replay.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from jobyard.api.deps import ConnDep, ProjectDep
from jobyard.api.pagination import Page, PageDep
from jobyard.api.ratelimit import enforce_enqueue_limit
from jobyard.api.resources._shared import IdPath, Text, as_page, keyset_after
from jobyard.api.resources.jobs import JobDetail
from jobyard.api.routes import Route, Scope
from jobyard.core import dlq, read_models
from jobyard.domain import limits
from jobyard.domain.enums import DeadLetterReason, Role
from jobyard.domain.ids import JobId
from jobyard.domain.schemas import check_payload
from jobyard.domain.text import reject_nul


class DeadLetterPublic(BaseModel):
    id: int
    queue: str
    queue_id: int
    job_id: int | None = Field(description="The dead job (null once retention pruned it).")
    handler: str
    priority: int
    reason: DeadLetterReason
    error: str | None
    error_fingerprint: str | None
    attempts: int
    dead_lettered_at: datetime
    replayed_at: datetime | None = Field(description="The last replay, if any.")
    replay_job_id: int | None


class DeadLetterDetail(DeadLetterPublic):
    payload: Any


class DeadLetterEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    payload: Any = Field(description="The payload a replay will use (64 KB at most).")

    _check_payload = field_validator("payload")(check_payload)


class DeadLetterReplay(BaseModel):
    model_config = ConfigDict(extra="forbid")

    payload: Any = Field(
        default=None,
        description="Replay with this payload instead (it is also saved); omit to "
        "replay the stored one.",
    )
    max_attempts: int | None = Field(default=None, ge=1, le=limits.MAX_ATTEMPTS_CEILING)

    _check_payload = field_validator("payload")(check_payload)


async def _detail(conn: ConnDep, project: ProjectDep, dlq_id: int) -> DeadLetterDetail:
    return DeadLetterDetail.model_validate(
        await read_models.get_dead_letter(conn, project.project_id, dlq_id)
    )


async def list_dead_letters(
    project: ProjectDep,
    conn: ConnDep,
    page: PageDep,
    queue: Annotated[Text | None, Query(max_length=100)] = None,
    error_fingerprint: Annotated[Text | None, Query(max_length=64)] = None,
) -> Page[DeadLetterPublic]:
    """Dead letters, newest first."""
    result = await read_models.list_dead_letters(
        conn,
        project.project_id,
        queue=queue,
        error_fingerprint=error_fingerprint,
        before_id=keyset_after(page),
        limit=page.limit,
    )
    return as_page(result, DeadLetterPublic)


async def get_dead_letter(dlq_id: IdPath, project: ProjectDep, conn: ConnDep) -> DeadLetterDetail:
    return await _detail(conn, project, dlq_id)


async def edit_dead_letter(
    dlq_id: IdPath, body: DeadLetterEdit, project: ProjectDep, conn: ConnDep
) -> DeadLetterDetail:
    """Fix a dead letter's payload before replaying it."""
    reject_nul(body.payload, "payload")
    await dlq.update_payload(conn, project.project_id, dlq_id, body.payload)
    return await _detail(conn, project, dlq_id)


async def replay_dead_letter(
    dlq_id: IdPath, project: ProjectDep, conn: ConnDep, body: DeadLetterReplay | None = None
) -> JobDetail:
    """Enqueue the dead letter again as a new queued job (optionally with a new payload)."""
    options = body or DeadLetterReplay()
    reject_nul(options.payload, "payload")
    await enforce_enqueue_limit(conn, project.project_id, 1)  # a replay is an enqueue
    job = await dlq.replay(
        conn, project.project_id, dlq_id, payload=options.payload, max_attempts=options.max_attempts
    )
    return JobDetail.model_validate(
        await read_models.get_job(conn, project.project_id, JobId(job["id"]))
    )


async def delete_dead_letter(dlq_id: IdPath, project: ProjectDep, conn: ConnDep) -> Response:
    await dlq.delete(conn, project.project_id, dlq_id)
    return Response(status_code=204)


TAGS = ("dead letters",)
BASE = "/projects/{project_id}/dead-letters"
ROUTES: tuple[Route, ...] = (
    Route("GET", BASE, Scope.PROJECT, list_dead_letters, min_role=Role.VIEWER,
          summary="List dead letters", response_model=Page[DeadLetterPublic], tags=TAGS,
          operation_id="dlq_list"),
    Route("GET", BASE + "/{dlq_id}", Scope.PROJECT, get_dead_letter, min_role=Role.VIEWER,
          summary="Get a dead letter", response_model=DeadLetterDetail, tags=TAGS,
          operation_id="dlq_get"),
    Route("PATCH", BASE + "/{dlq_id}", Scope.PROJECT, edit_dead_letter, min_role=Role.MEMBER,
          summary="Edit a dead letter's payload", response_model=DeadLetterDetail, tags=TAGS,
          operation_id="dlq_update"),
    Route("POST", BASE + "/{dlq_id}/replay", Scope.PROJECT, replay_dead_letter,
          min_role=Role.MEMBER, status_code=202, summary="Replay a dead letter as a new job",
          response_model=JobDetail, tags=TAGS, operation_id="dlq_replay", rate_limit="enqueue"),
    Route("DELETE", BASE + "/{dlq_id}", Scope.PROJECT, delete_dead_letter, min_role=Role.ADMIN,
          status_code=204, summary="Delete a dead letter", tags=TAGS, operation_id="dlq_delete"),
)  # fmt: skip
