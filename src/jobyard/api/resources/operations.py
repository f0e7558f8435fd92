"""Operator actions and explanations on jobs: why a job is not running, retry now, run now,
bulk actions on an explorer filter, failure groups with their bulk actions, and firing a
schedule by hand. Reads need viewer; actions need member; deleting needs admin."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field

from jobyard.api.deps import ConnDep, ProjectDep, SettingsDep
from jobyard.api.ratelimit import enforce_enqueue_limit
from jobyard.api.resources._shared import DateTimeText, IdPath, Text, utc
from jobyard.api.resources.jobs import JobDetail
from jobyard.api.routes import Route, Scope
from jobyard.core import actions, failures, read_models, schedules, why
from jobyard.core.read_models import JobFilters
from jobyard.domain.enums import JobStatus, Role
from jobyard.domain.ids import JobId

FingerprintPath = Annotated[str, Path(pattern=r"^[0-9a-f]{1,64}$")]


class ReasonPublic(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. queue_paused.")
    sentence: str
    ends_at: datetime | None = Field(description="When this reason ends, where that is known.")
    details: dict[str, Any]


class WhyPublic(BaseModel):
    job_id: int
    status: JobStatus
    at: datetime = Field(description="The database time the answer describes.")
    reasons: list[ReasonPublic]


class FilterBody(BaseModel):
    """The explorer's filters; every field optional (none: every job of the project)."""

    model_config = ConfigDict(extra="forbid")

    status: list[JobStatus] | None = None
    queue: Text | None = Field(default=None, max_length=100)
    handler: Text | None = Field(default=None, max_length=200)
    created_from: DateTimeText | None = None
    created_to: DateTimeText | None = None
    error_fingerprint: Text | None = Field(default=None, max_length=64)

    def filters(self) -> JobFilters:
        return JobFilters(
            statuses=self.status,
            queue=self.queue,
            handler=self.handler,
            created_from=utc(self.created_from, "filter.created_from"),
            created_to=utc(self.created_to, "filter.created_to"),
            error_fingerprint=self.error_fingerprint,
        )


class BulkBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["cancel", "retry", "run_now"]
    filter: FilterBody = Field(default_factory=FilterBody)


class BulkDeleteBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    filter: FilterBody = Field(default_factory=FilterBody)


class BulkPublic(BaseModel):
    action: str
    matched: int = Field(description="Jobs selected in a state the action applies to.")
    changed: int
    skipped: int = Field(description="Selected, but another change won the race.")
    batches: int
    truncated: bool = Field(description="Stopped at the per-request cap: send it again.")


class FailureGroupPublic(BaseModel):
    fingerprint: str
    count: int
    dead_lettered: int
    retrying: int
    first_seen_at: datetime
    last_seen_at: datetime
    handlers: list[str]
    queues: list[str]
    sample_job_id: int
    sample_error: str | None
    trend: list[int] = Field(description="Failing jobs per hour, last 24 hours, oldest first.")


class FailureGroupList(BaseModel):
    items: list[FailureGroupPublic]


class TriggeredPublic(BaseModel):
    job_id: int


def _bulk(result: actions.BulkResult) -> BulkPublic:
    return BulkPublic(
        action=result.action,
        matched=result.matched,
        changed=result.changed,
        skipped=result.skipped,
        batches=result.batches,
        truncated=result.truncated,
    )


async def _detail(conn: ConnDep, project: ProjectDep, job_id: int) -> JobDetail:
    return JobDetail.model_validate(
        await read_models.get_job(conn, project.project_id, JobId(job_id))
    )


# ----------------------------------------------------------------------------- handlers


async def why_job(
    job_id: IdPath, project: ProjectDep, conn: ConnDep, settings: SettingsDep
) -> WhyPublic:
    """Why the job is where it is: structured reasons (queue paused, at its concurrency limit,
    backing off, waiting on parents, no live worker, no worker with its handler, held by a
    silent worker, its place in line with an ETA)."""
    found = await why.explain(
        conn,
        project.project_id,
        JobId(job_id),
        heartbeat_interval_s=settings.heartbeat_interval_s,
        reaper_interval_s=settings.reaper_interval_s,
    )
    return WhyPublic(
        job_id=found.job_id,
        status=found.status,
        at=found.at,
        reasons=[ReasonPublic.model_validate(r.as_dict()) for r in found.reasons],
    )


async def retry_job(job_id: IdPath, project: ProjectDep, conn: ConnDep) -> JobDetail:
    """Retry now: a failed, dead-lettered or cancelled job is queued again at once (with one
    more attempt if it had used all of its), and the jobs the failure policy cancelled because
    of it wait again (as a workflow step's retry). 409 for a job in any other state."""
    await actions.act_on_job(conn, project.project_id, "retry", JobId(job_id))
    return await _detail(conn, project, job_id)


async def run_job_now(job_id: IdPath, project: ProjectDep, conn: ConnDep) -> JobDetail:
    """Run now: a scheduled job (delayed or backing off) is queued at once. 409 otherwise."""
    await actions.act_on_job(conn, project.project_id, "run_now", JobId(job_id))
    return await _detail(conn, project, job_id)


async def bulk_jobs(body: BulkBody, project: ProjectDep, conn: ConnDep) -> BulkPublic:
    """Cancel, retry or run now every job an explorer filter selects (in the states the action
    applies to), in batches of 500, at most 100,000 per request; returns the counts."""
    result = await actions.bulk(conn, project.project_id, body.action, body.filter.filters())
    return _bulk(result)


async def bulk_delete_jobs(body: BulkDeleteBody, project: ProjectDep, conn: ConnDep) -> BulkPublic:
    """Delete every job an explorer filter selects that no worker holds (their runs and logs
    go with them), in batches; returns the counts."""
    result = await actions.bulk(conn, project.project_id, "delete", body.filter.filters())
    return _bulk(result)


async def list_failure_groups(project: ProjectDep, conn: ConnDep) -> FailureGroupList:
    """Failing jobs (failed, dead-lettered, backing off after an error) grouped by error
    fingerprint across queues, most recently seen first (at most 200 groups)."""
    groups = await failures.list_groups(conn, project.project_id, limit=failures.MAX_GROUPS)
    return FailureGroupList(items=[FailureGroupPublic.model_validate(g) for g in groups])


async def get_failure_group(
    fingerprint: FingerprintPath, project: ProjectDep, conn: ConnDep
) -> FailureGroupPublic:
    return FailureGroupPublic.model_validate(
        await failures.get_group(conn, project.project_id, fingerprint)
    )


async def retry_failure_group(
    fingerprint: FingerprintPath, project: ProjectDep, conn: ConnDep
) -> BulkPublic:
    """Retry every job of the group now (dead-lettered and failed are queued again; those
    backing off run now)."""
    await failures.get_group(conn, project.project_id, fingerprint)
    return _bulk(await actions.group_action(conn, project.project_id, fingerprint, "retry"))


async def discard_failure_group(
    fingerprint: FingerprintPath, project: ProjectDep, conn: ConnDep
) -> BulkPublic:
    """Discard the group: delete its jobs and their dead letters."""
    await failures.get_group(conn, project.project_id, fingerprint)
    return _bulk(await actions.group_action(conn, project.project_id, fingerprint, "discard"))


async def trigger_schedule(
    schedule_id: IdPath, project: ProjectDep, conn: ConnDep
) -> TriggeredPublic:
    """Fire the schedule once now (a new queued job); its cron timing is unchanged."""
    await enforce_enqueue_limit(conn, project.project_id, 1)
    job_id = await schedules.trigger_now(conn, project.project_id, schedule_id)
    return TriggeredPublic(job_id=job_id)


JOBS = "/projects/{project_id}/jobs"
GROUPS = "/projects/{project_id}/failure-groups"
ROUTES: tuple[Route, ...] = (
    Route("GET", JOBS + "/{job_id}/why", Scope.PROJECT, why_job, min_role=Role.VIEWER,
          summary="Why is this job not running?", response_model=WhyPublic, tags=("jobs",)),
    Route("POST", JOBS + "/{job_id}/retry", Scope.PROJECT, retry_job, min_role=Role.MEMBER,
          summary="Retry a job now", response_model=JobDetail, tags=("jobs",),
          responses={409: "the job is not failed, dead-lettered or cancelled"}),
    Route("POST", JOBS + "/{job_id}/run-now", Scope.PROJECT, run_job_now, min_role=Role.MEMBER,
          summary="Run a scheduled job now", response_model=JobDetail, tags=("jobs",),
          responses={409: "the job is not scheduled"}),
    Route("POST", JOBS + "/bulk", Scope.PROJECT, bulk_jobs, min_role=Role.MEMBER,
          summary="Cancel, retry or run now the jobs of a filter", response_model=BulkPublic,
          tags=("jobs",)),
    Route("POST", JOBS + "/bulk-delete", Scope.PROJECT, bulk_delete_jobs, min_role=Role.ADMIN,
          summary="Delete the jobs of a filter", response_model=BulkPublic, tags=("jobs",)),
    Route("GET", GROUPS, Scope.PROJECT, list_failure_groups, min_role=Role.VIEWER,
          summary="Failure groups", response_model=FailureGroupList, tags=("failures",)),
    Route("GET", GROUPS + "/{fingerprint}", Scope.PROJECT, get_failure_group,
          min_role=Role.VIEWER, summary="One failure group", response_model=FailureGroupPublic,
          tags=("failures",)),
    Route("POST", GROUPS + "/{fingerprint}/retry", Scope.PROJECT, retry_failure_group,
          min_role=Role.MEMBER, summary="Retry a failure group", response_model=BulkPublic,
          tags=("failures",)),
    Route("POST", GROUPS + "/{fingerprint}/discard", Scope.PROJECT, discard_failure_group,
          min_role=Role.ADMIN, summary="Discard a failure group", response_model=BulkPublic,
          tags=("failures",)),
    Route("POST", "/projects/{project_id}/schedules/{schedule_id}/trigger", Scope.PROJECT,
          trigger_schedule, min_role=Role.MEMBER, status_code=202,
          summary="Fire a schedule now", response_model=TriggeredPublic, tags=("schedules",),
          rate_limit="enqueue"),
)  # fmt: skip
