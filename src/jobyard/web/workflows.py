"""Dashboard screens for workflows and batches: the DAG of a workflow (server-side SVG, each
step with its state, linked to its job page) with cancel and retry-a-step actions, and a
batch's progress bar with its callbacks and a cancel action."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from jobyard.core import workflows
from jobyard.domain.enums import Role
from jobyard.domain.ids import JobId
from jobyard.web import dag
from jobyard.web.pages import Ctx, _handle, _id, _see_other, render

router = APIRouter(include_in_schema=False)

RETRYABLE = frozenset({"dead_letter", "cancelled"})
PENDING = frozenset({"waiting", "scheduled", "queued", "claimed", "running"})


async def workflow_context(ctx: Ctx, raw_job_id: str) -> dict[str, Any]:
    job_id = JobId(_id(raw_job_id, "job"))
    graph = await workflows.graph(ctx.conn, ctx.project_id, job_id)
    counts: dict[str, int] = {}
    for n in graph.nodes:
        counts[n["status"]] = counts.get(n["status"], 0) + 1
    return ctx.base(
        root=job_id,
        graph=graph,
        drawing=dag.layout(graph.nodes, graph.edges),
        node_w=dag.NODE_W,
        node_h=dag.NODE_H,
        counts=sorted(counts.items()),
        retryable=RETRYABLE,
        has_pending=any(n["status"] in PENDING for n in graph.nodes),
    )


@router.get("/p/{project_id}/workflows/{job_id}")
async def workflow_page(request: Request, project_id: str, job_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("workflow.html", **await workflow_context(ctx, job_id))

    return await _handle(request, build, project_id=project_id)


@router.get("/partials/p/{project_id}/workflows/{job_id}")
async def workflow_partial(request: Request, project_id: str, job_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("_workflow.html", **await workflow_context(ctx, job_id))

    return await _handle(request, build, project_id=project_id, partial=True)


@router.post("/p/{project_id}/workflows/{job_id}/cancel")
async def workflow_cancel(request: Request, project_id: str, job_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        jid = JobId(_id(job_id, "job"))
        await workflows.cancel_workflow(ctx.conn, ctx.project_id, jid)
        return _see_other(f"/p/{ctx.project_id}/workflows/{jid}?done=workflow_cancelled")

    return await _handle(request, build, project_id=project_id, min_role=Role.MEMBER)


@router.post("/p/{project_id}/workflows/{job_id}/retry/{step_id}")
async def workflow_retry(request: Request, project_id: str, job_id: str, step_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        jid = JobId(_id(job_id, "job"))
        await workflows.retry_step(ctx.conn, ctx.project_id, JobId(_id(step_id, "job")))
        return _see_other(f"/p/{ctx.project_id}/workflows/{jid}?done=step_retried")

    return await _handle(request, build, project_id=project_id, min_role=Role.MEMBER)


async def batch_context(ctx: Ctx, raw_batch_id: str) -> dict[str, Any]:
    batch = await workflows.batch_status(ctx.conn, ctx.project_id, _id(raw_batch_id, "batch"))

    def pct(n: int) -> float:
        return round(100.0 * n / int(batch["size"]), 2)

    return ctx.base(
        batch=batch,
        bars=[(k, batch[k], pct(batch[k])) for k in ("done", "failed", "cancelled")],
        finished_pct=round(100.0 - pct(batch["pending"]), 1),
    )


@router.get("/p/{project_id}/batches/{batch_id}")
async def batch_page(request: Request, project_id: str, batch_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("batch.html", **await batch_context(ctx, batch_id))

    return await _handle(request, build, project_id=project_id)


@router.get("/partials/p/{project_id}/batches/{batch_id}")
async def batch_partial(request: Request, project_id: str, batch_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("_batch.html", **await batch_context(ctx, batch_id))

    return await _handle(request, build, project_id=project_id, partial=True)


@router.post("/p/{project_id}/batches/{batch_id}/cancel")
async def batch_cancel(request: Request, project_id: str, batch_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        bid = _id(batch_id, "batch")
        await workflows.cancel_batch(ctx.conn, ctx.project_id, bid)
        return _see_other(f"/p/{ctx.project_id}/batches/{bid}?done=batch_cancelled")

    return await _handle(request, build, project_id=project_id, min_role=Role.MEMBER)
