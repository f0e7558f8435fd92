"""Jobs: enqueue (one or a batch), the explorer list, get, cancel.

Enqueue answers 202 with the new job, or 200 with the existing one when the idempotency key and
payload match an earlier enqueue (409 when the key matches but the payload differs). Every
enqueue counts against the project's limit of 1000 jobs per minute (a batch counts each job).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Query, Response
from pydantic import BaseModel, Field

from jobyard.api.deps import ConnDep, ProjectDep
from jobyard.api.pagination import Page, PageDep
from jobyard.api.ratelimit import enforce_enqueue_limit
from jobyard.api.resources._shared import (
    DateTimeText,
    IdPath,
    Text,
    as_page,
    keyset_after,
    utc,
)
from jobyard.api.routes import Route, Scope
from jobyard.core import enqueue, read_models, transitions
from jobyard.core.read_models import JobFilters
from jobyard.domain.enums import JobStatus, Role
from jobyard.domain.errors import IllegalTransition
from jobyard.domain.ids import JobId
from jobyard.domain.schemas import BatchRequest, JobCreate
from jobyard.domain.text import reject_nul


class JobSummary(BaseModel):
    """A job as the explorer lists it (no payload or result)."""

    id: int
    queue: str
    queue_id: int
    handler: str
    status: JobStatus
    priority: int
    run_at: datetime
    attempt: int = Field(description="Attempts charged so far (refunded on infrastructure loss).")
    max_attempts: int
    execution_seq: int = Field(description="Physical runs so far; identifies each execution.")
    idempotency_key: str | None
    batch_id: int | None
    schedule_id: int | None
    worker_id: int | None
    claimed_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    last_error: str | None
    error_fingerprint: str | None
    timeout_ms: int | None
    created_at: datetime
    updated_at: datetime


class JobPublic(JobSummary):
    payload: Any
    result: Any = None
    retry_override: dict[str, Any] | None = None
    lock_expires_at: datetime | None = None
    lease_lost_count: int = 0
    progress: float | None = Field(
        default=None, description="The handler's latest ctx.progress fraction, 0 to 1."
    )
    progress_message: str | None = Field(
        default=None, description="The message of that progress report, if any."
    )
    progress_at: datetime | None = Field(default=None, description="When it was reported.")


class ExecutionSummary(BaseModel):
    total: int
    open: int = Field(description="Runs still in progress (at most one).")
    succeeded: int
    failed: int = Field(description="Failed or timed out.")
    lease_lost: int
    released: int
    cancelled: int
    last_execution_seq: int | None


class JobDetail(JobPublic):
    executions: ExecutionSummary


class BatchPublic(BaseModel):
    batch_id: int
    job_ids: list[int]
    queued: int = Field(description="Jobs ready to run now (the rest are delayed).")
    skipped: int = Field(description="Items whose idempotency key already named a job.")


# ----------------------------------------------------------------------------- handlers


async def enqueue_job(
    body: JobCreate, project: ProjectDep, conn: ConnDep, response: Response
) -> JobPublic:
    """Enqueue one job: now, later (run_at or delay_ms), with a priority and an optional
    idempotency key."""
    reject_nul(body.model_dump(), "")
    body = body.model_copy(update={"run_at": utc(body.run_at, "run_at")})
    await enforce_enqueue_limit(conn, project.project_id, 1)
    result = await enqueue.enqueue(conn, project.project_id, body)
    if not result.created:
        response.status_code = 200  # the key already named this very job
    return JobPublic.model_validate({**result.job, "queue": body.queue})


async def enqueue_batch(body: BatchRequest, project: ProjectDep, conn: ConnDep) -> BatchPublic:
    """Enqueue many jobs of one queue in one statement."""
    reject_nul(body.model_dump(), "")
    items = [
        item.model_copy(update={"run_at": utc(item.run_at, f"jobs[{i}].run_at")})
        for i, item in enumerate(body.jobs)
    ]
    body = body.model_copy(update={"jobs": items})
    await enforce_enqueue_limit(conn, project.project_id, len(body.jobs))
    result = await enqueue.enqueue_batch(conn, project.project_id, body)
    return BatchPublic(
        batch_id=result.batch_id,
        job_ids=result.job_ids,
        queued=result.queued,
        skipped=len(body.jobs) - len(result.job_ids),
    )


async def list_jobs(
    project: ProjectDep,
    conn: ConnDep,
    page: PageDep,
    status: Annotated[
        list[JobStatus] | None, Query(description="Repeat for several: ?status=a&status=b.")
    ] = None,
    queue: Annotated[Text | None, Query(max_length=100)] = None,
    handler: Annotated[Text | None, Query(max_length=200)] = None,
    created_from: Annotated[DateTimeText | None, Query(description="created_at >= this")] = None,
    created_to: Annotated[DateTimeText | None, Query(description="created_at < this")] = None,
    error_fingerprint: Annotated[Text | None, Query(max_length=64)] = None,
) -> Page[JobSummary]:
    """The job explorer: newest first, filtered, cursor-paginated."""
    filters = JobFilters(
        statuses=status,
        queue=queue,
        handler=handler,
        created_from=utc(created_from, "created_from"),
        created_to=utc(created_to, "created_to"),
        error_fingerprint=error_fingerprint,
    )
    result = await read_models.list_jobs(
        conn, project.project_id, filters, before_id=keyset_after(page), limit=page.limit
    )
    return as_page(result, JobSummary)


async def get_job(job_id: IdPath, project: ProjectDep, conn: ConnDep) -> JobDetail:
    return JobDetail.model_validate(
        await read_models.get_job(conn, project.project_id, JobId(job_id))
    )


async def cancel_job(
    job_id: IdPath, project: ProjectDep, conn: ConnDep, response: Response
) -> JobDetail:
    """Cancel a job. Waiting, scheduled or queued: cancelled at once (200). Claimed or running:
    its worker is asked to stop it (202; the job turns cancelled when the worker has). Finished
    jobs cannot be cancelled (409)."""
    row = await transitions.cancel(conn, project.project_id, JobId(job_id))
    job = await read_models.get_job(conn, project.project_id, JobId(job_id))  # 404 if missing
    if row is None:
        raise IllegalTransition(
            f"the job is already {job['status']}; only unfinished jobs can be cancelled",
            status=job["status"],
        )
    if job["status"] == JobStatus.CANCELLED:
        response.status_code = 200
    return JobDetail.model_validate(job)


TAGS = ("jobs",)
BASE = "/projects/{project_id}/jobs"
ROUTES: tuple[Route, ...] = (
    Route("GET", BASE, Scope.PROJECT, list_jobs, min_role=Role.VIEWER,
          summary="List jobs (explorer)", response_model=Page[JobSummary], tags=TAGS),
    Route("POST", BASE, Scope.PROJECT, enqueue_job, min_role=Role.MEMBER, status_code=202,
          summary="Enqueue a job", response_model=JobPublic, tags=TAGS,
          operation_id="jobs_enqueue", rate_limit="enqueue",
          responses={200: "the idempotency key already named this job (same payload): that job",
                     409: "the idempotency key names a job with another payload, or a "
                          "depends_on parent already ended dead-lettered or cancelled"}),
    Route("POST", BASE + "/batch", Scope.PROJECT, enqueue_batch, min_role=Role.MEMBER,
          status_code=202, summary="Enqueue a batch of jobs", response_model=BatchPublic,
          tags=TAGS, operation_id="jobs_enqueue_batch", rate_limit="enqueue"),
    Route("GET", BASE + "/{job_id}", Scope.PROJECT, get_job, min_role=Role.VIEWER,
          summary="Get a job", response_model=JobDetail, tags=TAGS),
    Route("POST", BASE + "/{job_id}/cancel", Scope.PROJECT, cancel_job, min_role=Role.MEMBER,
          status_code=202, summary="Cancel a job", response_model=JobDetail, tags=TAGS,
          responses={200: "cancelled at once (it was not running)",
                     409: "the job is already finished"}),
)  # fmt: skip
