"""Per-project metrics as JSON, for the dashboard and scripts (Prometheus text is /metrics).

Depth per queue keeps claimable jobs (`queued`) apart from delayed ones (`scheduled`, with
`scheduled_due` = due but not yet promoted), plus `waiting` (unmet dependencies) and in flight.
Capacity is the summed concurrency of active workers. Throughput, outcome counts and latency
percentiles cover finished runs of the last 60 minutes, read from the statistics rollup
(percentiles estimated from its histogram buckets).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Query
from pydantic import BaseModel, Field

from jobyard.api import prometheus
from jobyard.api.deps import ConnDep, ProjectDep
from jobyard.api.resources._shared import Text
from jobyard.api.routes import Route, Scope
from jobyard.core import read_models
from jobyard.domain.enums import Role


class QueueMetrics(BaseModel):
    id: int
    name: str
    is_paused: bool
    priority: int
    max_concurrency: int | None
    queued: int = Field(description="Claimable now.")
    scheduled: int = Field(description="Delayed or waiting to retry (not claimable yet).")
    scheduled_due: int = Field(description="Scheduled jobs already due, awaiting promotion.")
    waiting: int = Field(description="Waiting for parent jobs.")
    in_flight: int = Field(description="Claimed or running.")
    running: int
    dead_letters: int = Field(description="Dead letters not replayed yet.")
    oldest_queued_age_s: float | None = Field(
        description="How long the oldest claimable job has been due."
    )
    worker_capacity: int = Field(
        description="Concurrency of active workers serving this queue (shared with their "
        "other queues)."
    )


class WorkerTotals(BaseModel):
    active: int
    draining: int
    capacity: int = Field(description="Summed concurrency of active workers.")
    in_flight: int


class ThroughputPoint(BaseModel):
    minute: datetime
    done: int = Field(description="Runs that succeeded in this minute.")
    failed: int = Field(description="Runs that failed or timed out in this minute.")


class OutcomeCounts(BaseModel):
    finished: int
    succeeded: int
    failed: int
    timed_out: int
    lease_lost: int
    released: int
    cancelled: int


class Percentiles(BaseModel):
    p50: float | None
    p95: float | None
    p99: float | None


class Latency(BaseModel):
    run: Percentiles = Field(description="Run time (duration_ms) of finished runs.")
    queue_wait: Percentiles = Field(description="From due (run_at) to claim, per finished job.")


class ProjectMetrics(BaseModel):
    queue: str | None = Field(description="The queue the totals were limited to, if any.")
    queues: list[QueueMetrics]
    workers: WorkerTotals
    throughput: list[ThroughputPoint] = Field(description="60 points, oldest first.")
    last_hour: OutcomeCounts
    latency_ms: Latency


async def project_metrics(
    project: ProjectDep,
    conn: ConnDep,
    queue: Annotated[
        Text | None, Query(max_length=100, description="Limit to one queue (by name).")
    ] = None,
) -> ProjectMetrics:
    return ProjectMetrics.model_validate(
        await read_models.project_metrics(conn, project.project_id, queue=queue)
    )


ROUTES: tuple[Route, ...] = (
    *prometheus.ROUTES,  # GET /metrics, at the root (not per project)
    Route("GET", "/projects/{project_id}/metrics", Scope.PROJECT, project_metrics,
          min_role=Role.VIEWER, summary="Project metrics (depth, throughput, latency)",
          response_model=ProjectMetrics, tags=("metrics",), operation_id="metrics_project"),
)  # fmt: skip
