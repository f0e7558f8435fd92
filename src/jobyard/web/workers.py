"""Worker pages: one worker's detail (identity, handlers, capacity, heartbeat, held jobs, recent
runs) and the topology (queues and workers as nodes with connectors, server-side SVG)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from jobyard.core import worker_views, workers
from jobyard.domain.enums import Role
from jobyard.domain.ids import WorkerId
from jobyard.logs import get_logger
from jobyard.web import pages, svg

log = get_logger("jobyard.web")

router = APIRouter(include_in_schema=False)


async def topology_context(ctx: pages.Ctx) -> dict[str, Any]:
    queues = await worker_views.topology_queues(ctx.conn, ctx.project_id)
    workers = await worker_views.topology_workers(ctx.conn, ctx.project_id)
    for w in workers:
        w["health"] = worker_views.health_words(w)  # drawn after the status on its node
    return ctx.base(
        queues=queues,
        workers=workers,
        topology_svg=svg.topology(queues, workers, base=f"/p/{ctx.project_id}"),
    )


@router.get("/p/{project_id}/topology")
async def topology(request: Request, project_id: str) -> Response:
    async def build(ctx: pages.Ctx) -> Response:
        return pages.render("topology.html", **await topology_context(ctx))

    return await pages._handle(request, build, project_id=project_id)


async def _set_paused(request: Request, project_id: str, worker_id: str, paused: bool) -> Response:
    async def build(ctx: pages.Ctx) -> Response:
        wid = WorkerId(pages._id(worker_id, "worker"))
        by = ctx.session.user.email
        await workers.set_paused(ctx.conn, ctx.project_id, wid, paused, by=by)
        log.info("worker paused" if paused else "worker resumed", worker_id=wid)
        done = "worker_paused" if paused else "worker_resumed"
        return pages._see_other(f"/p/{ctx.project_id}/workers/{wid}?done={done}")

    return await pages._handle(request, build, project_id=project_id, min_role=Role.ADMIN)


@router.post("/p/{project_id}/workers/{worker_id}/pause")
async def worker_pause(request: Request, project_id: str, worker_id: str) -> Response:
    return await _set_paused(request, project_id, worker_id, True)


@router.post("/p/{project_id}/workers/{worker_id}/resume")
async def worker_resume(request: Request, project_id: str, worker_id: str) -> Response:
    return await _set_paused(request, project_id, worker_id, False)


@router.get("/p/{project_id}/workers/{worker_id}")
async def worker_detail(request: Request, project_id: str, worker_id: str) -> Response:
    async def build(ctx: pages.Ctx) -> Response:
        wid = WorkerId(pages._id(worker_id, "worker"))
        worker = await worker_views.worker_detail(ctx.conn, ctx.project_id, wid)
        worker["uptime"] = svg._span(float(worker["uptime_s"]))
        return pages.render("worker.html", **ctx.base(worker=worker))

    return await pages._handle(request, build, project_id=project_id)
