"""Statistics pages: per-project and per-queue throughput, failures and run-time / queue-wait
percentiles over 1 h, 24 h or 7 d, drawn as server-side SVG from the scheduler's rollup
(core.stats: `queue_stats` minute buckets), so a chart never scans `jobs`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from jobyard.core import read_models, stats
from jobyard.domain.ids import QueueId
from jobyard.web import pages, svg

router = APIRouter(include_in_schema=False)


async def charts_context(ctx: pages.Ctx, raw_queue_id: str | None) -> dict[str, Any]:
    window = ctx.request.query_params.get("window", "1h")
    queue = None
    if raw_queue_id is not None:
        queue = await read_models.get_queue(
            ctx.conn, ctx.project_id, QueueId(pages._id(raw_queue_id, "queue"))
        )
    chart = await stats.series(
        ctx.conn,
        ctx.project_id,
        window=window,
        queue_id=QueueId(int(queue["id"])) if queue else None,
    )
    return ctx.base(
        queue=queue,
        window=window,
        windows=list(stats.WINDOWS),
        chart=chart,
        throughput_svg=svg.throughput(chart),
        run_svg=svg.latency(chart, "run_ms", "run time"),
        wait_svg=svg.latency(chart, "wait_ms", "queue wait"),
    )


@router.get("/p/{project_id}/stats")
async def project_stats(request: Request, project_id: str) -> Response:
    async def build(ctx: pages.Ctx) -> Response:
        return pages.render("stats.html", **await charts_context(ctx, None))

    return await pages._handle(request, build, project_id=project_id)


@router.get("/p/{project_id}/queues/{queue_id}/stats")
async def queue_stats(request: Request, project_id: str, queue_id: str) -> Response:
    async def build(ctx: pages.Ctx) -> Response:
        return pages.render("stats.html", **await charts_context(ctx, queue_id))

    return await pages._handle(request, build, project_id=project_id)
