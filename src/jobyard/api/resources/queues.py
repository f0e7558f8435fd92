"""Queues: list, create, get, update (priority, concurrency, retry policy, timeout), pause,
resume, delete. Reads need viewer; every change needs admin."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Response
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from jobyard.api.deps import ConnDep, ProjectDep
from jobyard.api.pagination import Page, PageDep
from jobyard.api.resources._shared import Id, IdPath, as_page, keyset_after
from jobyard.api.routes import Route, Scope
from jobyard.core import admin, read_models
from jobyard.domain.enums import Role
from jobyard.domain.ids import QueueId
from jobyard.domain.schemas import Priority, QueueName

MaxConcurrency = Annotated[int, Field(ge=1, le=100_000)]
TimeoutMs = Annotated[int, Field(ge=1, le=86_400_000)]


class QueueCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: QueueName
    priority: Priority = 0
    is_paused: bool = False
    max_concurrency: MaxConcurrency | None = Field(
        default=None, description="Jobs of this queue running at once, cluster-wide; null: no cap."
    )
    retry_policy_id: Id | None = None
    default_timeout_ms: TimeoutMs | None = None


class QueueUpdate(BaseModel):
    """Only the fields you send change; null clears max_concurrency, retry_policy_id or
    default_timeout_ms."""

    model_config = ConfigDict(extra="forbid")

    priority: Priority | SkipJsonSchema[None] = None  # not nullable: omit it to keep it
    max_concurrency: MaxConcurrency | None = None
    retry_policy_id: Id | None = None
    default_timeout_ms: TimeoutMs | None = None

    @model_validator(mode="after")
    def _priority_not_null(self) -> QueueUpdate:
        if "priority" in self.model_fields_set and self.priority is None:
            raise ValueError("priority cannot be null")
        return self


class QueuePublic(BaseModel):
    id: int
    name: str
    priority: int
    is_paused: bool
    max_concurrency: int | None
    retry_policy_id: int | None
    retry_policy_name: str | None = None
    default_timeout_ms: int | None
    created_at: datetime
    updated_at: datetime


async def _public(conn: ConnDep, project: ProjectDep, queue_id: int) -> QueuePublic:
    row = await read_models.get_queue(conn, project.project_id, QueueId(queue_id))
    return QueuePublic.model_validate(row)


async def list_queues(project: ProjectDep, conn: ConnDep, page: PageDep) -> Page[QueuePublic]:
    result = await read_models.list_queues(
        conn, project.project_id, after_id=keyset_after(page), limit=page.limit
    )
    return as_page(result, QueuePublic)


async def create_queue(body: QueueCreate, project: ProjectDep, conn: ConnDep) -> QueuePublic:
    row = await admin.create_queue(conn, project.project_id, **body.model_dump())
    return await _public(conn, project, row["id"])


async def get_queue(queue_id: IdPath, project: ProjectDep, conn: ConnDep) -> QueuePublic:
    return await _public(conn, project, queue_id)


async def update_queue(
    queue_id: IdPath, body: QueueUpdate, project: ProjectDep, conn: ConnDep
) -> QueuePublic:
    changes: dict[str, Any] = body.model_dump(include=body.model_fields_set)
    await admin.update_queue(conn, project.project_id, QueueId(queue_id), changes)
    return await _public(conn, project, queue_id)


async def pause_queue(queue_id: IdPath, project: ProjectDep, conn: ConnDep) -> QueuePublic:
    """Stop claims from this queue (jobs already running finish). Idempotent."""
    await admin.set_queue_paused(conn, project.project_id, QueueId(queue_id), True)
    return await _public(conn, project, queue_id)


async def resume_queue(queue_id: IdPath, project: ProjectDep, conn: ConnDep) -> QueuePublic:
    """Let workers claim from this queue again. Idempotent."""
    await admin.set_queue_paused(conn, project.project_id, QueueId(queue_id), False)
    return await _public(conn, project, queue_id)


async def delete_queue(queue_id: IdPath, project: ProjectDep, conn: ConnDep) -> Response:
    """Delete an idle queue with its finished history. 409 while it has unfinished jobs or
    schedules."""
    await admin.delete_queue(conn, project.project_id, QueueId(queue_id))
    return Response(status_code=204)


TAGS = ("queues",)
BASE = "/projects/{project_id}/queues"
ROUTES: tuple[Route, ...] = (
    Route("GET", BASE, Scope.PROJECT, list_queues, min_role=Role.VIEWER,
          summary="List queues", response_model=Page[QueuePublic], tags=TAGS),
    Route("POST", BASE, Scope.PROJECT, create_queue, min_role=Role.ADMIN, status_code=201,
          summary="Create a queue", response_model=QueuePublic, tags=TAGS,
          responses={409: "the name is taken"}),
    Route("GET", BASE + "/{queue_id}", Scope.PROJECT, get_queue, min_role=Role.VIEWER,
          summary="Get a queue", response_model=QueuePublic, tags=TAGS),
    Route("PATCH", BASE + "/{queue_id}", Scope.PROJECT, update_queue, min_role=Role.ADMIN,
          summary="Update a queue", response_model=QueuePublic, tags=TAGS,
          responses={409: "the name is taken"}),
    Route("POST", BASE + "/{queue_id}/pause", Scope.PROJECT, pause_queue, min_role=Role.ADMIN,
          summary="Pause a queue", response_model=QueuePublic, tags=TAGS),
    Route("POST", BASE + "/{queue_id}/resume", Scope.PROJECT, resume_queue, min_role=Role.ADMIN,
          summary="Resume a queue", response_model=QueuePublic, tags=TAGS),
    Route("DELETE", BASE + "/{queue_id}", Scope.PROJECT, delete_queue, min_role=Role.ADMIN,
          status_code=204, summary="Delete a queue", tags=TAGS,
          responses={409: "the queue has unfinished jobs or schedules"}),
)  # fmt: skip
