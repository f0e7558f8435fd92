"""Workflows: DAGs of jobs enqueued in one transaction, their control (cancel, retry a step) and
the batch and graph reads behind the API and the dashboard.

The dependency bookkeeping itself (queue a child when its parents are final, cancel it when one
ended dead_letter or cancelled, count a batch and fire its callbacks once) is the database's:
the `jobs_final_effects` trigger of migration 0008, in the transaction of each final transition.
"""

from __future__ import annotations

import graphlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from jobyard.core import actions, enqueue
from jobyard.core.clock import sql_now
from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.errors import NotFound, ValidationFailed
from jobyard.domain.ids import JobId, ProjectId
from jobyard.domain.schemas import JobCreate, WorkflowCreate

# Bounds what one workflow read (the page, a cancel) walks.
MAX_MEMBERS: Final = 1000


@dataclass(frozen=True)
class WorkflowResult:
    """The ids of the enqueued steps, by step key."""

    job_ids: dict[str, int]


@dataclass(frozen=True)
class WorkflowGraph:
    root: int
    nodes: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False


def topological_order(workflow: WorkflowCreate) -> list[str]:
    """Step keys, parents first. A cycle or a repeated key is a ValidationFailed (422); an
    unknown key is NotFound (404), as a parent job id that does not exist is."""
    # Steps are named by position, not by key: the API withholds submitted values (keys),
    # which would leave these messages without their subject.
    keys = [s.key for s in workflow.steps]
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key in first:
            raise ValidationFailed(
                f"step keys must be unique: steps[{i}].key repeats steps[{first[key]}].key",
                field=f"steps[{i}].key",
            )
        first[key] = i
    graph: dict[str, list[str]] = {}
    for i, step in enumerate(workflow.steps):
        local = [a for a in step.after if isinstance(a, str)]
        for j, after in enumerate(step.after):
            if isinstance(after, str) and after not in first:
                raise NotFound(
                    f"steps[{i}].after[{j}] names a key that no step has (unknown steps)",
                    field=f"steps[{i}].after[{j}]",
                )
        graph[step.key] = local
    try:
        return list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        cycle = " → ".join(str(k) for k in reversed(exc.args[1]))
        raise ValidationFailed(f"the steps form a cycle: {cycle}", field="steps") from None


async def enqueue_workflow(
    conn: Conn, project_id: ProjectId, workflow: WorkflowCreate, *, now: datetime | None = None
) -> WorkflowResult:
    """Insert every step in one transaction, parents first; a step's `after` names step keys or
    existing job ids of this project. Nothing is inserted when any step is refused."""
    order = topological_order(workflow)
    by_key = {s.key: s for s in workflow.steps}
    ids: dict[str, int] = {}
    async with conn.transaction():
        for key in order:
            step = by_key[key]
            parents = [ids[a] if isinstance(a, str) else a for a in step.after]
            job = JobCreate.model_validate(
                {
                    **step.model_dump(exclude={"key", "after"}),
                    "depends_on": sorted({*step.depends_on, *parents}),
                }
            )
            result = await enqueue.enqueue(conn, project_id, job, now=now, whole_job=False)
            ids[key] = int(result.job["id"])
    return WorkflowResult(job_ids={s.key: ids[s.key] for s in workflow.steps})


async def members(conn: Conn, project_id: ProjectId, job_id: JobId) -> list[dict[str, Any]]:
    """The jobs connected to `job_id` by dependencies (its workflow), bounded."""
    return await run.all_rows(
        conn,
        "read_workflow_members",
        {"project_id": project_id, "job_id": job_id, "limit": MAX_MEMBERS + 1},
    )


async def graph(conn: Conn, project_id: ProjectId, job_id: JobId) -> WorkflowGraph:
    """Nodes and edges of the workflow `job_id` belongs to; NotFound for another project's."""
    nodes = await members(conn, project_id, job_id)
    if not nodes:
        raise NotFound("job not found")
    truncated = len(nodes) > MAX_MEMBERS
    nodes = nodes[:MAX_MEMBERS]
    edges = await run.all_rows(conn, "read_workflow_edges", {"ids": [n["id"] for n in nodes]})
    return WorkflowGraph(root=job_id, nodes=nodes, edges=edges, truncated=truncated)


async def cancel_workflow(
    conn: Conn, project_id: ProjectId, job_id: JobId, *, now: datetime | None = None
) -> dict[str, list[int]]:
    """Cancel the pending steps of the workflow `job_id` belongs to and ask the workers
    holding its running steps to stop them. Finished steps keep their outcome."""
    ids = [n["id"] for n in await members(conn, project_id, job_id)]
    if not ids:
        raise NotFound("job not found")
    params = {
        "project_id": project_id,
        "ids": ids,
        "now": sql_now(now),
        "reason": f"workflow cancelled (through job {job_id})",
    }
    return await _cancel_members(conn, "workflow_cancel_pending", "workflow_request_cancel", params)


async def cancel_batch(
    conn: Conn, project_id: ProjectId, batch_id: int, *, now: datetime | None = None
) -> dict[str, list[int]]:
    """Cancel the batch's pending jobs and ask workers to stop its running ones. The last
    of them to reach a final state fires the batch's on_complete/on_failure callback."""
    await batch_status(conn, project_id, batch_id)
    params = {
        "project_id": project_id,
        "batch_id": batch_id,
        "now": sql_now(now),
        "reason": f"batch {batch_id} cancelled",
    }
    return await _cancel_members(conn, "batch_cancel_pending", "batch_request_cancel", params)


async def retry_step(
    conn: Conn, project_id: ProjectId, job_id: JobId, *, now: datetime | None = None
) -> dict[str, list[int]]:
    """Retry one step: `actions.retry`, the operators' retry now (one more attempt if it had
    used all of its, its dead letter marked replayed), which also puts back to waiting the
    dependents the failure policy cancelled because of it, so the workflow continues.
    NotFound for another project's job; IllegalTransition (naming why) if it cannot be retried."""
    done = await actions.retry_job(conn, project_id, job_id, now=now)
    return {"retried": done.retried, "revived": done.revived, "still_blocked": done.still_blocked}


async def batch_status(conn: Conn, project_id: ProjectId, batch_id: int) -> dict[str, Any]:
    """total, done, failed, cancelled, pending and the callbacks of one batch."""
    row = await run.one(conn, "read_batch_get", {"project_id": project_id, "batch_id": batch_id})
    if row is None:
        raise NotFound("batch not found")
    return row


async def parent_results(conn: Conn, job_id: int) -> dict[int, Any]:
    """The results of a job's parents by parent id (None for a parent that did not succeed)."""
    rows = await run.all_rows(conn, "read_job_parent_results", {"job_id": job_id})
    return {r["id"]: (r["result"] if r["status"] == "done" else None) for r in rows}


async def parents(conn: Conn, project_id: ProjectId, job_id: JobId) -> list[dict[str, Any]]:
    """A job's parents (id, handler, status, run_anyway)."""
    return await run.all_rows(
        conn, "read_job_parents", {"project_id": project_id, "job_id": job_id}
    )


async def in_workflow(conn: Conn, job_id: JobId) -> bool:
    """Whether the job has parents or children (so a workflow page exists for it)."""
    row = await run.one(conn, "read_job_in_workflow", {"job_id": job_id})
    return bool(row and row["linked"])


async def outcomes(conn: Conn, project_id: ProjectId, ids: list[int]) -> list[dict[str, Any]]:
    """id, status and result of the given jobs of this project."""
    return await run.all_rows(conn, "read_job_outcomes", {"project_id": project_id, "ids": ids})


async def _cancel_members(
    conn: Conn, cancel_pending: str, request_cancel: str, params: dict[str, Any]
) -> dict[str, list[int]]:
    """One transaction: cancel the pending members, ask workers to stop the running ones."""
    async with conn.transaction():
        cancelled = await run.all_rows(conn, cancel_pending, params)
        requested = await run.all_rows(conn, request_cancel, params)
    return {
        "cancelled": sorted(r["id"] for r in cancelled),
        "requested": sorted(r["id"] for r in requested),
    }
