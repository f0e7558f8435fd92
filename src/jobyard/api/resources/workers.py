"""Workers: the processes that claim and run jobs — status, last heartbeat, in-flight jobs vs
capacity, the queues they serve, their health (handler threads that outlived their runs, event
loop stalls), and (per worker) their recent heartbeats. An admin can pause a worker (it claims
nothing until resumed) and resume it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Query
from pydantic import BaseModel, Field

from jobyard.api.deps import ConnDep, ProjectAccess, ProjectDep
from jobyard.api.pagination import Page, PageDep
from jobyard.api.resources._shared import IdPath, as_page, keyset_after
from jobyard.api.routes import Route, Scope
from jobyard.core import read_models, workers
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role, WorkerStatus
from jobyard.domain.ids import WorkerId


class LoopStallPublic(BaseModel):
    started_at: datetime = Field(description="When the event loop stopped turning.")
    blocked_s: float = Field(
        description="How long it stood: the final length once ended; while `ongoing`, the "
        "length when the stall was first reported (it has stood since `started_at`)."
    )
    ongoing: bool = Field(description="The loop has not turned again yet.")
    handler: str | None = Field(
        description="The registered handler on the loop's stack (null: none was)."
    )
    job_ids: list[int] = Field(description="Jobs that were running that handler (at most 20).")
    at: str = Field(description="Where the loop stood: file:line in function.")


class WorkerPublic(BaseModel):
    id: int
    name: str
    hostname: str
    pid: int | None
    queues: list[str]
    status: WorkerStatus
    capacity: int = Field(description="Jobs it runs at once (its concurrency).")
    in_flight: int = Field(description="Jobs it holds now (claimed or running).")
    started_at: datetime
    last_heartbeat_at: datetime
    stopped_at: datetime | None
    orphan_threads: int = Field(
        description="Handler threads still running after their run was recorded (a timeout or "
        "cancel the handler ignored): each holds one of its slots until it returns."
    )
    loop_stalls: int = Field(
        description="Times an async handler blocked its event loop past the worker's threshold "
        "(JOBYARD_LOOP_BLOCK_WARN_S) since it started."
    )
    loop_stall: LoopStallPublic | None = Field(description="The latest of those stalls.")
    paused_at: datetime | None = Field(
        description="When an operator paused it (null: it claims). A paused worker claims "
        "nothing, from its next heartbeat on, until resumed; its running jobs go on."
    )
    paused_by: str | None = Field(
        description="Who paused it: an account's email, `api key #ID`, or `user@host (cli)`."
    )


class HeartbeatPublic(BaseModel):
    beat_at: datetime
    in_flight: int
    capacity: int


class WorkerDetail(WorkerPublic):
    recent_heartbeats: list[HeartbeatPublic] = Field(description="Newest first.")


async def list_workers(
    project: ProjectDep,
    conn: ConnDep,
    page: PageDep,
    status: Annotated[list[WorkerStatus] | None, Query(description="Repeat for several.")] = None,
) -> Page[WorkerPublic]:
    """Workers, newest first."""
    result = await read_models.list_workers(
        conn, project.project_id, statuses=status, before_id=keyset_after(page), limit=page.limit
    )
    return as_page(result, WorkerPublic)


async def get_worker(worker_id: IdPath, project: ProjectDep, conn: ConnDep) -> WorkerDetail:
    return WorkerDetail.model_validate(
        await read_models.get_worker(conn, project.project_id, WorkerId(worker_id))
    )


async def pause_worker(worker_id: IdPath, project: ProjectDep, conn: ConnDep) -> WorkerDetail:
    """Pause a live worker: from its next heartbeat it claims nothing until resumed; the jobs it
    runs go on. Pausing a paused worker keeps the first `paused_at`."""
    return await _set_paused(conn, project, WorkerId(worker_id), True)


async def resume_worker(worker_id: IdPath, project: ProjectDep, conn: ConnDep) -> WorkerDetail:
    """Resume a paused worker: it claims again from its next heartbeat."""
    return await _set_paused(conn, project, WorkerId(worker_id), False)


async def _set_paused(
    conn: Conn, project: ProjectAccess, worker_id: WorkerId, paused: bool
) -> WorkerDetail:
    who = project.principal
    by = who.user.email if who.user else f"api key #{who.api_key.id if who.api_key else '?'}"
    await workers.set_paused(conn, project.project_id, worker_id, paused, by=by)
    return WorkerDetail.model_validate(
        await read_models.get_worker(conn, project.project_id, worker_id)
    )


TAGS = ("workers",)
BASE = "/projects/{project_id}/workers"
ROUTES: tuple[Route, ...] = (
    Route("GET", BASE, Scope.PROJECT, list_workers, min_role=Role.VIEWER,
          summary="List workers", response_model=Page[WorkerPublic], tags=TAGS),
    Route("GET", BASE + "/{worker_id}", Scope.PROJECT, get_worker, min_role=Role.VIEWER,
          summary="Get a worker with its recent heartbeats", response_model=WorkerDetail,
          tags=TAGS),
    Route("POST", BASE + "/{worker_id}/pause", Scope.PROJECT, pause_worker, min_role=Role.ADMIN,
          summary="Pause a worker (it claims nothing until resumed)", response_model=WorkerDetail,
          tags=TAGS, responses={409: "the worker has stopped or died"}),
    Route("POST", BASE + "/{worker_id}/resume", Scope.PROJECT, resume_worker,
          min_role=Role.ADMIN, summary="Resume a paused worker", response_model=WorkerDetail,
          tags=TAGS, responses={409: "the worker has stopped or died"}),
)  # fmt: skip
