"""A job's executions (one row per physical run) and its log lines, both cursor-paginated."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Query
from pydantic import BaseModel, Field

from jobyard.api.deps import ConnDep, ProjectDep
from jobyard.api.pagination import Page, PageDep
from jobyard.api.resources._shared import IdPath, as_page, keyset_after
from jobyard.api.routes import Route, Scope
from jobyard.core import read_models
from jobyard.domain.enums import ExecutionOutcome, Role
from jobyard.domain.ids import JobId


class ExecutionPublic(BaseModel):
    id: int | None = Field(
        description="null for the run in flight: its row is written when the run ends."
    )
    execution_seq: int
    attempt: int
    attempt_charged: bool
    worker_id: int | None
    outcome: ExecutionOutcome | None = Field(description="null while the run is in progress.")
    started_at: datetime
    finished_at: datetime | None
    duration_ms: int | None
    error: str | None
    error_fingerprint: str | None
    traceback: str | None = Field(
        default=None,
        description="The full traceback of a run whose handler raised (at most 16000 "
        "characters; a longer one keeps its head and tail around a marker).",
    )


class LogPublic(BaseModel):
    id: int
    execution_seq: int
    level: str
    message: str
    fields: dict[str, Any]
    created_at: datetime


MAX_EXECUTION_SEQ = 2**31 - 1


async def list_executions(
    job_id: IdPath, project: ProjectDep, conn: ConnDep, page: PageDep
) -> Page[ExecutionPublic]:
    """A job's runs in order (one per claim, including refunded ones)."""
    after = keyset_after(page)
    # execution_seq is an integer column: a position past its range is past every run.
    after_seq = None if after is None else min(after, MAX_EXECUTION_SEQ)
    result = await read_models.list_executions(
        conn, project.project_id, JobId(job_id), after_seq=after_seq, limit=page.limit
    )
    return as_page(result, ExecutionPublic)


async def list_logs(
    job_id: IdPath,
    project: ProjectDep,
    conn: ConnDep,
    page: PageDep,
    execution_seq: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
) -> Page[LogPublic]:
    """A job's log lines, oldest first (optionally of one run). Poll with the last next_cursor
    to follow new lines."""
    result = await read_models.list_logs(
        conn,
        project.project_id,
        JobId(job_id),
        after_id=keyset_after(page),
        execution_seq=execution_seq,
        limit=page.limit,
    )
    return as_page(result, LogPublic)


TAGS = ("jobs",)
BASE = "/projects/{project_id}/jobs"
ROUTES: tuple[Route, ...] = (
    Route("GET", BASE + "/{job_id}/executions", Scope.PROJECT, list_executions,
          min_role=Role.VIEWER, summary="List a job's executions",
          response_model=Page[ExecutionPublic], tags=TAGS),
    Route("GET", BASE + "/{job_id}/logs", Scope.PROJECT, list_logs, min_role=Role.VIEWER,
          summary="List a job's log lines", response_model=Page[LogPublic], tags=TAGS),
)  # fmt: skip
