"""Workflows and batches: enqueue a DAG of jobs, read its graph, cancel it, retry a failed step;
a batch's progress and its cancellation.

A workflow is the set of jobs connected by dependencies, named by any of its members. A batch
is enqueued by `POST /jobs/batch` (with optional callbacks); here it is read and cancelled.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from jobyard.api.deps import ConnDep, ProjectDep
from jobyard.api.ratelimit import enforce_enqueue_limit
from jobyard.api.resources._shared import IdPath, utc
from jobyard.api.routes import Route, Scope
from jobyard.core import workflows
from jobyard.domain.enums import JobStatus, Role
from jobyard.domain.ids import JobId
from jobyard.domain.schemas import WorkflowCreate
from jobyard.domain.text import reject_nul


class WorkflowCreated(BaseModel):
    job_ids: dict[str, int] = Field(description="The new job of each step, by step key.")


class WorkflowNode(BaseModel):
    id: int
    handler: str
    status: JobStatus
    queue: str
    batch_id: int | None
    attempt: int
    max_attempts: int
    cancel_reason: str | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None


class WorkflowEdge(BaseModel):
    job_id: int = Field(description="The child.")
    depends_on_job_id: int = Field(description="The parent it waits for.")
    run_anyway: bool


class WorkflowPublic(BaseModel):
    root: int
    nodes: list[WorkflowNode]
    edges: list[WorkflowEdge]
    truncated: bool = Field(description=f"More than {workflows.MAX_MEMBERS} members.")


class WorkflowControl(BaseModel):
    cancelled: list[int] = Field(default_factory=list)
    requested: list[int] = Field(
        default_factory=list, description="Running steps whose workers were asked to stop."
    )


class StepRetried(BaseModel):
    retried: list[int]
    revived: list[int] = Field(description="Dependents put back to waiting.")
    still_blocked: list[int] = Field(
        description="Revived, but cancelled again: another parent failed."
    )


class BatchStatus(BaseModel):
    id: int
    queue: str
    size: int = Field(description="Jobs in the batch (total).")
    done: int
    failed: int = Field(description="Dead-lettered.")
    cancelled: int
    pending: int = Field(description="Not yet in a final state.")
    callbacks: dict[str, Any]
    completed_at: datetime | None = Field(description="When the last job reached a final state.")
    callback_job_ids: list[int]
    created_at: datetime


async def enqueue_workflow(
    body: WorkflowCreate, project: ProjectDep, conn: ConnDep
) -> WorkflowCreated:
    """Enqueue a DAG of steps in one transaction. A step's `after` names other steps by key, or
    existing jobs of this project by id. A cycle, an unknown key, a foreign or failed parent
    is a 422 and enqueues nothing."""
    reject_nul(body.model_dump(), "")
    steps = [
        s.model_copy(update={"run_at": utc(s.run_at, f"steps[{i}].run_at")})
        for i, s in enumerate(body.steps)
    ]
    body = body.model_copy(update={"steps": steps})
    await enforce_enqueue_limit(conn, project.project_id, len(body.steps))
    result = await workflows.enqueue_workflow(conn, project.project_id, body)
    return WorkflowCreated(job_ids=result.job_ids)


async def get_workflow(job_id: IdPath, project: ProjectDep, conn: ConnDep) -> WorkflowPublic:
    """The workflow `job_id` belongs to: its jobs (with status) and dependency edges."""
    g = await workflows.graph(conn, project.project_id, JobId(job_id))
    return WorkflowPublic.model_validate(
        {"root": g.root, "nodes": g.nodes, "edges": g.edges, "truncated": g.truncated}
    )


async def cancel_workflow(job_id: IdPath, project: ProjectDep, conn: ConnDep) -> WorkflowControl:
    """Cancel the workflow's pending steps; running ones are asked to stop."""
    return WorkflowControl(
        **await workflows.cancel_workflow(conn, project.project_id, JobId(job_id))
    )


async def retry_step(job_id: IdPath, project: ProjectDep, conn: ConnDep) -> StepRetried:
    """Run a dead-lettered or cancelled step again; the dependents the failure policy cancelled
    because of it wait again, so the workflow continues."""
    return StepRetried(**await workflows.retry_step(conn, project.project_id, JobId(job_id)))


async def get_batch(batch_id: IdPath, project: ProjectDep, conn: ConnDep) -> BatchStatus:
    """A batch's progress: total, done, failed, cancelled, pending, and its callbacks."""
    row = await workflows.batch_status(conn, project.project_id, batch_id)
    return BatchStatus.model_validate({**row, "callback_job_ids": list(row["callback_job_ids"])})


async def cancel_batch(batch_id: IdPath, project: ProjectDep, conn: ConnDep) -> WorkflowControl:
    """Cancel the batch's pending jobs; running ones are asked to stop. Its on_failure and
    on_complete callbacks fire when the last job is final."""
    return WorkflowControl(**await workflows.cancel_batch(conn, project.project_id, batch_id))


TAGS = ("workflows",)
WF = "/projects/{project_id}/workflows"
BATCH = "/projects/{project_id}/batches/{batch_id}"
ROUTES: tuple[Route, ...] = (
    Route("POST", WF, Scope.PROJECT, enqueue_workflow, min_role=Role.MEMBER, status_code=202,
          summary="Enqueue a workflow (a DAG of jobs)", response_model=WorkflowCreated, tags=TAGS,
          rate_limit="enqueue", responses={404: "a parent job or queue does not exist",
                                           409: "a parent already ended dead-lettered or "
                                                "cancelled (pass run_anyway)"}),
    Route("GET", WF + "/{job_id}", Scope.PROJECT, get_workflow, min_role=Role.VIEWER,
          summary="The workflow a job belongs to", response_model=WorkflowPublic, tags=TAGS),
    Route("POST", WF + "/{job_id}/cancel", Scope.PROJECT, cancel_workflow, min_role=Role.MEMBER,
          summary="Cancel a workflow's pending steps", response_model=WorkflowControl, tags=TAGS),
    Route("POST", WF + "/{job_id}/retry", Scope.PROJECT, retry_step, min_role=Role.MEMBER,
          summary="Retry a failed step", response_model=StepRetried, tags=TAGS,
          responses={409: "the step cannot be retried in its state, or was cancelled because "
                          "its parent failed (retry the parent)"}),
    Route("GET", BATCH, Scope.PROJECT, get_batch, min_role=Role.VIEWER,
          summary="A batch's progress", response_model=BatchStatus, tags=TAGS),
    Route("POST", BATCH + "/cancel", Scope.PROJECT, cancel_batch, min_role=Role.MEMBER,
          summary="Cancel a batch's pending jobs", response_model=WorkflowControl, tags=TAGS),
)  # fmt: skip
