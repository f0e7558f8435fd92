"""Live dashboards over server-sent events, fed by ONE LISTEN connection per API process.

`LiveHub` holds a single dedicated database connection that LISTENs on `jobyard_jobs` (enqueue,
promotion, requeue, replay), `jobyard_cancel` and `jobyard_events` (stats folded by the
scheduler, dashboard actions) and fans each notification out to in-process subscribers. A
browser's EventSource is one subscriber: it costs an asyncio queue, never a database connection;
when an event concerns its page, the stream borrows a pooled connection just long enough to
re-render the page's fragment (the same `*_context()` builder and template as the page and its
`/partials/` route) and sends it as an SSE `fragment` event.

Safety nets: a stream re-renders every FALLBACK_S even without events (lost notifications, a
listener reconnecting), ends after MAX_STREAM_S so the browser reconnects and its session and
project access are checked again, and the page script falls back to 2 s polling of `/partials/`
when EventSource is unavailable or keeps failing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from jobyard.api.deps import get_keys
from jobyard.core import clock, live, read_models
from jobyard.db.pool import connect
from jobyard.domain.enums import Role
from jobyard.domain.errors import JobyardError, ValidationFailed
from jobyard.logs import get_logger
from jobyard.web import csrf, pages
from jobyard.web.session import WebSession, apply_cookies, resolve

log = get_logger("jobyard.web.live")

router = APIRouter(include_in_schema=False)

APPLICATION_NAME: Final = "jobyard-api-live"
MIN_GAP_S: Final = 0.5  # at most two renders a second per stream, however busy the queues
FALLBACK_S: Final = 15.0
MAX_STREAM_S: Final = 300.0
RECONNECT_S: Final = (0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True)
class Event:
    """One notification: which queues (None = unknown, concerns everyone) and which job."""

    kind: str
    queue_ids: frozenset[int] | None
    job_id: int | None = None

    @classmethod
    def parse(cls, channel: str, payload: str) -> Event:
        def ints(text: str) -> frozenset[int] | None:
            got = frozenset(int(x) for x in text.split(",") if x.isdigit())
            return got or None

        if channel == "jobyard_jobs":
            return cls("jobs", ints(payload))
        if channel == "jobyard_cancel":
            job, _, _ = payload.partition(":")
            return cls("cancel", None, int(job) if job.isdigit() else None)
        kind, _, rest = payload.partition(":")
        queues, _, job = rest.partition(":")
        return cls(kind or "event", ints(queues), int(job) if job.isdigit() else None)


class Subscription:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=256)

    def put(self, event: Event) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(event)  # full: a render is pending anyway

    async def next(self, within_s: float) -> Event | None:
        try:
            return await asyncio.wait_for(self.queue.get(), within_s)
        except TimeoutError:
            return None

    def drain(self) -> list[Event]:
        got = []
        while not self.queue.empty():
            got.append(self.queue.get_nowait())
        return got


class LiveHub:
    """The process's one listener; started with the first subscriber, stopped with the app."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self.subscribers: set[Subscription] = set()
        self.connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def subscribe(self) -> Subscription:
        sub = Subscription()
        self.subscribers.add(sub)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="jobyard-live-listener")
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self.subscribers.discard(sub)

    def publish(self, event: Event) -> None:
        for sub in list(self.subscribers):
            sub.put(event)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                conn = await connect(
                    self.conninfo, autocommit=True, application_name=APPLICATION_NAME
                )
                try:
                    await live.listen(conn)
                    self.connected.set()
                    failures = 0
                    # Whatever happened while not listening: every page renders once.
                    self.publish(Event("listening", None))
                    async for n in conn.notifies():
                        self.publish(Event.parse(n.channel, n.payload))
                finally:
                    self.connected.clear()
                    with contextlib.suppress(Exception):
                        await conn.close()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: reconnect with backoff
                log.warning("live listener lost", error=type(exc).__name__)
            failures += 1
            await asyncio.sleep(RECONNECT_S[min(failures, len(RECONNECT_S)) - 1])


def get_hub(app: FastAPI) -> LiveHub:
    hub: LiveHub | None = getattr(app.state, "live_hub", None)
    if hub is None:
        hub = LiveHub(app.state.pool.conninfo)
        app.state.live_hub = hub
        app.state.closers = [*getattr(app.state, "closers", []), hub.stop]
    return hub


# ----------------------------------------------------------------------------- streams

Fragment = Callable[[pages.Ctx], Awaitable[tuple[str, set[int] | None, int | None]]]
"""Renders a page's fragment; returns (html, queue ids it shows or None = all, job id)."""


def _sse(event: str, html: str) -> str:
    data = "\n".join(f"data: {line}" for line in html.splitlines() or [""])
    return f"event: {event}\n{data}\n\n"


def _relevant(event: Event, queues: set[int] | None, job_id: int | None) -> bool:
    if event.kind in {"listening", "cancel"} and event.job_id is None:
        return True
    if job_id is not None and event.job_id == job_id:
        return True
    if queues is None or event.queue_ids is None:
        return True
    return bool(queues & event.queue_ids)


T = TypeVar("T")


async def subscribed_render(
    hub: LiveHub, render: Callable[[], Awaitable[T]]
) -> tuple[Subscription, T]:
    """Subscribe, then render. In this order every change is seen: one committed before the
    render's read is in the render, one committed after it notifies a subscription that
    already exists. Rendered first, a change committing between the read and the subscription
    would reach the page only at the next FALLBACK_S re-render."""
    sub = hub.subscribe()
    try:
        return sub, await render()
    except BaseException:
        hub.unsubscribe(sub)
        raise


@dataclass(frozen=True)
class _Opened:
    session: WebSession
    first: str
    queues: set[int] | None
    job_id: int | None


async def _open(request: Request, project_id: str, fragment: Fragment) -> _Opened | Response:
    """Authenticate once (cookies may rotate here: headers are still ahead), render the first
    fragment; a refusal is the Response to send instead of a stream."""
    async with pages._connection(request) as conn:
        session = await resolve(conn, get_keys(request), request)
        if session is None:
            return Response(status_code=401)
        try:
            ctx = pages.Ctx(
                request, conn, session, csrf.session_token(get_keys(request), session.family_id)
            )
            await pages._admit(ctx, project_id, Role.VIEWER)
            first, queues, job_id = await fragment(ctx)
        except JobyardError as exc:
            return Response(status_code=pages._status_of(exc))
    return _Opened(session, first, queues, job_id)


async def _stream(request: Request, project_id: str, fragment: Fragment) -> Response:
    hub = get_hub(request.app)
    sub, opened = await subscribed_render(hub, lambda: _open(request, project_id, fragment))
    if isinstance(opened, Response):
        hub.unsubscribe(sub)
        return opened
    session, first, queues, job_id = opened.session, opened.first, opened.queues, opened.job_id

    async def render() -> str | None:
        async with pages._connection(request) as c:
            ctx = pages.Ctx(
                request, c, session, csrf.session_token(get_keys(request), session.family_id)
            )
            try:
                await pages._admit(ctx, project_id, Role.VIEWER)  # access revoked: stop
                html, _, _ = await fragment(ctx)
            except JobyardError:
                return None
        return html

    async def events() -> AsyncIterator[str]:
        try:
            yield "retry: 2000\n\n"
            yield _sse("fragment", first)
            last_html, last_at = first, clock.monotonic()
            ends = clock.monotonic() + MAX_STREAM_S
            while clock.monotonic() < ends:
                event = await sub.next(FALLBACK_S)
                if event is not None and not _relevant(event, queues, job_id):
                    continue
                wait = last_at + MIN_GAP_S - clock.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)  # coalesce a burst into one render
                sub.drain()
                html = await render()
                last_at = clock.monotonic()
                if html is None:
                    yield "event: gone\ndata: \n\n"
                    return
                if html != last_html:
                    last_html = html
                    yield _sse("fragment", html)
                else:
                    yield ": unchanged\n\n"  # also tells a dead client apart (write fails)
        finally:
            hub.unsubscribe(sub)

    response = StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
    apply_cookies(request, response, session.new_cookies)
    return response


def _html(name: str, context: dict[str, Any]) -> str:
    return pages._env.get_template(name).render(**context)


# ----------------------------------------------------------------------------- fragments of
# the jobs list and the DLQ (the other pages' fragments live with their pages)

LATEST_LETTERS: Final = 10


async def jobs_rows_context(ctx: pages.Ctx) -> dict[str, Any]:
    """The explorer's first page under the URL's filters (bad filters: no rows)."""
    try:
        filters, _ = pages.parse_filters(dict(ctx.request.query_params))
    except ValidationFailed:
        return ctx.base(rows=[])
    page = await read_models.list_jobs(ctx.conn, ctx.project_id, filters, limit=pages.PAGE_SIZE)
    return ctx.base(rows=page.items)


async def dlq_latest_context(ctx: pages.Ctx) -> dict[str, Any]:
    page = await read_models.list_dead_letters(ctx.conn, ctx.project_id, limit=LATEST_LETTERS)
    return ctx.base(latest=page.items)


async def _partial(request: Request, project_id: str, name: str, build: Any) -> Response:
    async def handle(ctx: pages.Ctx) -> Response:
        return pages.render(name, **await build(ctx))

    return await pages._handle(request, handle, project_id=project_id, partial=True)


@router.get("/partials/p/{project_id}/jobs")
async def jobs_partial(request: Request, project_id: str) -> Response:
    return await _partial(request, project_id, "_jobs_rows.html", jobs_rows_context)


@router.get("/partials/p/{project_id}/dlq")
async def dlq_partial(request: Request, project_id: str) -> Response:
    return await _partial(request, project_id, "_dlq_latest.html", dlq_latest_context)


@router.get("/live/p/{project_id}/overview")
async def live_overview(request: Request, project_id: str) -> Response:
    async def fragment(ctx: pages.Ctx) -> tuple[str, set[int] | None, int | None]:
        return _html("_overview.html", await pages.overview_context(ctx)), None, None

    return await _stream(request, project_id, fragment)


@router.get("/live/p/{project_id}/queues/{queue_id}")
async def live_queue(request: Request, project_id: str, queue_id: str) -> Response:
    async def fragment(ctx: pages.Ctx) -> tuple[str, set[int] | None, int | None]:
        context = await pages.queue_context(ctx, queue_id)
        return _html("_queue.html", context), {int(context["queue"]["id"])}, None

    return await _stream(request, project_id, fragment)


@router.get("/live/p/{project_id}/jobs/{job_id}")
async def live_job(request: Request, project_id: str, job_id: str) -> Response:
    async def fragment(ctx: pages.Ctx) -> tuple[str, set[int] | None, int | None]:
        context = await pages.job_context(ctx, job_id)
        job = context["job"]
        return _html("_job.html", context), {int(job["queue_id"])}, int(job["id"])

    return await _stream(request, project_id, fragment)


@router.get("/live/p/{project_id}/jobs")
async def live_jobs(request: Request, project_id: str) -> Response:
    async def fragment(ctx: pages.Ctx) -> tuple[str, set[int] | None, int | None]:
        return _html("_jobs_rows.html", await jobs_rows_context(ctx)), None, None

    return await _stream(request, project_id, fragment)


@router.get("/live/p/{project_id}/dlq")
async def live_dlq(request: Request, project_id: str) -> Response:
    async def fragment(ctx: pages.Ctx) -> tuple[str, set[int] | None, int | None]:
        return _html("_dlq_latest.html", await dlq_latest_context(ctx)), None, None

    return await _stream(request, project_id, fragment)


@router.get("/live/p/{project_id}/workers")
async def live_workers(request: Request, project_id: str) -> Response:
    async def fragment(ctx: pages.Ctx) -> tuple[str, set[int] | None, int | None]:
        return _html("_workers.html", await pages.workers_context(ctx)), None, None

    return await _stream(request, project_id, fragment)
