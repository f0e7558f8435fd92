"""Dashboard pages. Each live screen is a page route plus a `/partials/...` route that renders
only its live fragment; both use the same `*_context()` builder, so the fragment the browser
polls every 2 s is exactly what the page first showed.

Every request resolves the user from the session cookie; every project page applies the API
guard's rules (another org's or a missing project → 404, a role too low → 403); every POST is
CSRF-checked before anything is read or changed. Pages call core functions only (read_models for
reads; admin, dlq, transitions for actions) — never SQL of their own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.datastructures import FormData

from jobyard.api.deps import POOL_TIMEOUT_S, get_keys, get_pool
from jobyard.api.errors import STATUS_BY_ERROR
from jobyard.api.ratelimit import (
    enforce_enqueue_limit,
    forgive_login_attempt,
    take_login_attempt,
)
from jobyard.core import (
    actions,
    admin,
    db_health,
    dlq,
    job_logs,
    live,
    read_models,
    schedules,
    stats,
    tenancy,
    transitions,
    why,
    workflows,
)
from jobyard.core.auth import AuthenticationFailed, PermissionDenied, user_project_access
from jobyard.core.cron_words import describe
from jobyard.core.ratelimit import RateLimited
from jobyard.core.read_models import JobFilters
from jobyard.db.pool import Conn
from jobyard.domain import limits
from jobyard.domain.enums import JobStatus, Role, WorkerStatus
from jobyard.domain.errors import JobyardError, NotFound, ValidationFailed
from jobyard.domain.ids import JobId, OrgId, ProjectId, QueueId
from jobyard.domain.lifecycle import operator_sources
from jobyard.domain.text import reject_nul
from jobyard.logs import get_logger
from jobyard.web import csrf, svg
from jobyard.web.session import (
    ACCESS_COOKIE,
    REFRESH_COOKIE,
    WebSession,
    apply_cookies,
    clear_cookies,
    log_in,
    log_out,
    resolve,
)

log = get_logger("jobyard.web")

router = APIRouter(include_in_schema=False)
_MAX_ID: Final = 2**63 - 1
PAGE_SIZE: Final = 50
LOG_PAGE: Final = 100
FILTER_KEYS: Final = ("status", "queue", "handler", "from", "to", "fingerprint")
# No inline script or style anywhere, so the policy can forbid both.
CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
NOTICES: Final = {
    "cancelled": "The job was cancelled.",
    "cancel_requested": "Cancel requested: the worker holding the job has been asked to stop it.",
    "paused": "Queue paused: workers stop claiming from it.",
    "resumed": "Queue resumed.",
    "worker_paused": "Worker paused: it claims nothing from its next heartbeat on; its running "
    "jobs go on.",
    "worker_resumed": "Worker resumed: it claims again from its next heartbeat.",
    "saved": "Payload saved.",
    "deleted": "Dead letter deleted.",
    "replayed": "Replayed as a new queued job.",
    "invited": "Invitation sent. The link reaches the invitee only; it works once, for 7 days.",
    "resent": "A new link was sent; the previous one no longer works.",
    "revoked": "Invitation revoked: its link no longer works.",
    "joined": "Welcome: you joined the organization.",
    "workflow_cancelled": "The workflow's pending steps were cancelled; running ones told to stop.",
    "step_retried": "The step runs again; the steps cancelled because of it wait for it again.",
    "batch_cancelled": "The batch's pending jobs were cancelled; running ones asked to stop.",
    # console.py's actions
    "retried": "Queued again: it runs as soon as a worker is free.",
    "run_now": "Queued to run now.",
    "triggered": "Schedule fired by hand: this is the job it enqueued.",
    "created": "Schedule created.",
    "updated": "Schedule saved.",
    "enabled": "Schedule enabled.",
    "disabled": "Schedule disabled: it fires no more until enabled.",
    "schedule_deleted": "Schedule deleted.",
    "settings": "Queue settings saved.",
}


# ----------------------------------------------------------------------------- rendering


def _ts(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def _ago(value: datetime | None) -> str:
    if value is None:
        return "never"
    s = int((datetime.now(UTC) - value).total_seconds())
    if s < 0:
        return f"in {_span(-s)}"
    return f"{_span(s)} ago"


def _span(s: int) -> str:
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 1000:
        return f"{value:.0f} ms"
    return f"{value / 1000:.2f} s"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


_env = Environment(
    loader=PackageLoader("jobyard.web", "templates"),
    autoescape=True,  # every value is escaped, payloads and error texts included
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters.update(ts=_ts, ago=_ago, ms=_ms, pretty=pretty_json)


def render(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = _env.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status_code, headers={"Content-Security-Policy": CSP})


def _see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _status_of(exc: JobyardError) -> int:
    if isinstance(exc, csrf.CsrfRefused):
        return 403
    for cls, status in STATUS_BY_ERROR:
        if isinstance(exc, cls):
            return status
    return 400


# ----------------------------------------------------------------------------- request context


@dataclass
class Ctx:
    """One dashboard request: its connection, signed-in user, and (project pages) the project."""

    request: Request
    conn: Conn
    session: WebSession
    csrf_token: str
    form: FormData | None = None
    project: dict[str, Any] = field(default_factory=dict)
    role: Role = Role.VIEWER

    @property
    def project_id(self) -> ProjectId:
        return ProjectId(int(self.project["id"]))

    def can(self, role: str) -> bool:
        return self.role.at_least(Role(role))

    def base(self, **extra: Any) -> dict[str, Any]:
        """What every template gets."""
        notice = NOTICES.get(self.request.query_params.get("done", ""))
        return {
            "user": self.session.user,
            "csrf_token": self.csrf_token,
            "project": self.project,
            "role": self.role,
            "can": self.can,
            "notice": notice,
            "path": self.request.url.path,
            **extra,
        }


@asynccontextmanager
async def _connection(request: Request) -> AsyncIterator[Conn]:
    async with get_pool(request).connection(timeout=POOL_TIMEOUT_S) as conn:
        yield conn


def _id(raw: str, what: str) -> int:
    if not raw.isdigit() or int(raw) > _MAX_ID:
        raise NotFound(f"{what} not found")
    return int(raw)


async def _admit(ctx: Ctx, raw_project_id: str, min_role: Role) -> None:
    """The API guard's rule for project routes, applied to a dashboard user."""
    access = await user_project_access(
        ctx.conn, ctx.session.user.id, _id(raw_project_id, "project")
    )
    if access is None:
        raise NotFound("project not found")
    if not access.role.at_least(min_role):
        raise PermissionDenied(
            f"this action needs the {min_role} role or higher; you are {access.role}"
        )
    ctx.role = access.role
    ctx.project = await tenancy.get_project(ctx.conn, ProjectId(int(raw_project_id)))
    ctx.project["org"] = await tenancy.get_org(ctx.conn, OrgId(int(ctx.project["org_id"])))


Build = Callable[[Ctx], Awaitable[Response]]


async def _handle(
    request: Request,
    build: Build,
    *,
    project_id: str | None = None,
    min_role: Role = Role.VIEWER,
    partial: bool = False,
) -> Response:
    """Resolve the session, check CSRF (POST) and project access, then build the response.

    Errors become an HTML page with the matching status (a bare status for partials)."""
    new_cookies: dict[str, tuple[str, int]] = {}
    response: Response
    try:
        async with _connection(request) as conn:
            session = await resolve(conn, get_keys(request), request)
            if session is None:
                if partial or request.method != "GET":
                    # No redirect for a POST: a form sent without a session must not run later.
                    raise AuthenticationFailed("sign in to continue")
                return _see_other(f"/login?next={request.url.path}")
            new_cookies = session.new_cookies
            ctx = Ctx(
                request,
                conn,
                session,
                csrf.session_token(get_keys(request), session.family_id),
            )
            if request.method == "POST":
                ctx.form = await request.form()
                csrf.check(request, ctx.form.get(csrf.FIELD), ctx.csrf_token)
            if project_id is not None:
                await _admit(ctx, project_id, min_role)
            response = await build(ctx)
    except JobyardError as exc:
        status = _status_of(exc)
        if partial:
            response = Response(status_code=status)
        else:
            response = render("error.html", status, status=status, message=exc.message)
    apply_cookies(request, response, new_cookies)
    return response


# ----------------------------------------------------------------------------- sign in / out


def _safe_next(raw: str | None) -> str:
    """Only a local path: `next` must never send a signed-in user to another site."""
    if raw and raw.startswith("/") and not raw.startswith("//") and "\\" not in raw:
        return raw
    return "/projects"


def _login_page(
    request: Request, status: int = 200, error: str | None = None, email: str = ""
) -> HTMLResponse:
    token = csrf.new_login_token()
    response = render(
        "login.html",
        status,
        csrf_token=token,
        error=error,
        email=email,
        next=_safe_next(request.query_params.get("next")),
    )
    response.set_cookie(
        csrf.LOGIN_COOKIE,
        token,
        max_age=3600,
        path="/login",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.get("/")
async def home(request: Request) -> Response:
    if request.cookies.get(ACCESS_COOKIE) or request.cookies.get(REFRESH_COOKIE):
        return _see_other("/projects")
    return _see_other("/login")


@router.get("/login")
async def login_form(request: Request) -> Response:
    return _login_page(request)


@router.post("/login")
async def login_submit(request: Request) -> Response:
    form = await request.form()
    email = str(form.get("email") or "")
    try:
        csrf.check(request, form.get(csrf.FIELD), request.cookies.get(csrf.LOGIN_COOKIE))
    except csrf.CsrfRefused as exc:
        return render("error.html", 403, status=403, message=exc.message)
    async with _connection(request) as conn:
        try:
            # The API's limit and buckets: 5 failed attempts / 15 min per account and IP,
            # counted before the password; a success gives its attempt back.
            await take_login_attempt(conn, request, email)
            _, cookies = await log_in(
                conn, get_keys(request), email, str(form.get("password") or "")
            )
            await forgive_login_attempt(conn, request, email)
        except RateLimited as exc:
            wait = f"try again in {exc.retry_after_s} s"
            return _login_page(request, 429, f"Too many sign-in attempts; {wait}.", email)
        except (AuthenticationFailed, ValidationFailed):
            return _login_page(request, 401, "Invalid email or password.", email)
    response = _see_other(_safe_next(str(form.get("next") or "")))
    apply_cookies(request, response, cookies)
    response.delete_cookie(csrf.LOGIN_COOKIE, path="/login")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    async def build(ctx: Ctx) -> Response:
        await log_out(ctx.conn, ctx.session)
        response = _see_other("/login")
        clear_cookies(request, response)
        return response

    response = await _handle(request, build)
    if response.status_code == 303:
        # The family is revoked: rotated cookies set on the way in must not be sent back.
        del response.headers["set-cookie"]
        clear_cookies(request, response)
    return response


@router.get("/projects")
async def projects(request: Request) -> Response:
    async def build(ctx: Ctx) -> Response:
        orgs = await tenancy.org_page_for_user(ctx.conn, ctx.session.user.id, after_id=0, limit=500)
        for org in orgs:
            org["projects"] = await tenancy.project_page(
                ctx.conn, OrgId(int(org["id"])), after_id=0, limit=500
            )
        return render("projects.html", **ctx.base(orgs=orgs))

    return await _handle(request, build)


# ----------------------------------------------------------------------------- overview


def rollup_metrics(live: dict[str, Any], chart: dict[str, Any]) -> dict[str, Any]:
    """The page's `m`: live depth and workers, plus the last hour of finished runs from the
    scheduler's rollup (core.stats), so no page aggregates `job_executions` at request time."""
    t = chart["totals"]
    return {
        **live,
        "last_hour": {"succeeded": t["succeeded"], "failed": t["failed"], "timed_out": 0},
        "latency_ms": {"run": t["run_ms"], "queue_wait": t["wait_ms"]},
    }


async def overview_context(ctx: Ctx) -> dict[str, Any]:
    live_now = await read_models.project_live(ctx.conn, ctx.project_id)
    workers = await read_models.list_workers(
        ctx.conn, ctx.project_id, statuses=[WorkerStatus.ACTIVE, WorkerStatus.DRAINING], limit=20
    )
    # The chart and the last hour's figures read the scheduler's rollup (never `jobs`).
    chart = await stats.series(ctx.conn, ctx.project_id, window="1h")
    metrics = rollup_metrics(live_now, chart)
    settings = ctx.request.app.state.settings
    health = await db_health.read(
        ctx.conn,
        xmin_warn_s=settings.health_xmin_warn_s,
        dead_ratio_warn=settings.health_dead_ratio_warn,
    )
    last5 = chart["points"][-5:]
    return ctx.base(
        health=health,
        m=metrics,
        throughput_svg=svg.throughput(chart),
        per_minute=sum(p["succeeded"] + p["failed"] for p in last5) / 5,
        workers=workers.items,
        totals={
            k: sum(int(q[k]) for q in metrics["queues"])
            for k in ("queued", "scheduled", "in_flight", "dead_letters")
        },
    )


@router.get("/p/{project_id}")
async def overview(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("overview.html", **await overview_context(ctx))

    return await _handle(request, build, project_id=project_id)


@router.get("/partials/p/{project_id}/overview")
async def overview_partial(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("_overview.html", **await overview_context(ctx))

    return await _handle(request, build, project_id=project_id, partial=True)


# ----------------------------------------------------------------------------- queues


@router.get("/p/{project_id}/queues")
async def queues(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        page = await read_models.list_queues(ctx.conn, ctx.project_id, limit=500)
        live_now = await read_models.project_live(ctx.conn, ctx.project_id)
        by_id = {q["id"]: q for q in live_now["queues"]}
        return render("queues.html", **ctx.base(queues=page.items, stats=by_id))

    return await _handle(request, build, project_id=project_id)


async def queue_context(ctx: Ctx, raw_queue_id: str) -> dict[str, Any]:
    queue_id = QueueId(_id(raw_queue_id, "queue"))
    queue = await read_models.get_queue(ctx.conn, ctx.project_id, queue_id)
    live_now = await read_models.project_live(ctx.conn, ctx.project_id, queue=queue["name"])
    chart = await stats.series(ctx.conn, ctx.project_id, window="1h", queue_id=queue_id)
    metrics = rollup_metrics(live_now, chart)
    recent = await read_models.list_jobs(
        ctx.conn, ctx.project_id, JobFilters(queue=queue["name"]), limit=20
    )
    policies = await read_models.list_policies(ctx.conn, ctx.project_id, limit=200)
    return ctx.base(
        queue=queue,
        m=metrics,
        stats=metrics["queues"][0],
        recent=recent.items,
        policies=policies.items,
    )


@router.get("/p/{project_id}/queues/{queue_id}")
async def queue_detail(request: Request, project_id: str, queue_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("queue.html", **await queue_context(ctx, queue_id))

    return await _handle(request, build, project_id=project_id)


@router.get("/partials/p/{project_id}/queues/{queue_id}")
async def queue_partial(request: Request, project_id: str, queue_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("_queue.html", **await queue_context(ctx, queue_id))

    return await _handle(request, build, project_id=project_id, partial=True)


async def _set_paused(request: Request, project_id: str, queue_id: str, paused: bool) -> Response:
    async def build(ctx: Ctx) -> Response:
        qid = QueueId(_id(queue_id, "queue"))
        await admin.set_queue_paused(ctx.conn, ctx.project_id, qid, paused)
        await live.notify(ctx.conn, "queue", qid)
        log.info("queue paused" if paused else "queue resumed", queue_id=qid)
        done = "paused" if paused else "resumed"
        return _see_other(f"/p/{ctx.project_id}/queues/{qid}?done={done}")

    return await _handle(request, build, project_id=project_id, min_role=Role.ADMIN)


@router.post("/p/{project_id}/queues/{queue_id}/pause")
async def queue_pause(request: Request, project_id: str, queue_id: str) -> Response:
    return await _set_paused(request, project_id, queue_id, True)


@router.post("/p/{project_id}/queues/{queue_id}/resume")
async def queue_resume(request: Request, project_id: str, queue_id: str) -> Response:
    return await _set_paused(request, project_id, queue_id, False)


# ----------------------------------------------------------------------------- job explorer


def _instant(raw: str, name: str) -> datetime | None:
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise ValidationFailed(f"{name}: not a date and time ({raw!r})", field=name) from None
    # Times typed into the form are UTC, as every time the dashboard shows.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _text(raw: str, name: str, max_len: int) -> str | None:
    value = raw.strip()
    if "\x00" in value or len(value) > max_len:
        raise ValidationFailed(f"{name}: at most {max_len} characters", field=name)
    return value or None


def parse_filters(params: dict[str, str]) -> tuple[JobFilters, int | None]:
    """Explorer filters and cursor from the query string; a bad one is a ValidationFailed."""
    status = params.get("status", "")
    if status and status not in {s.value for s in JobStatus}:
        raise ValidationFailed(f"status: {status!r} is not a job status", field="status")
    before = params.get("before", "")
    if before and (not before.isdigit() or int(before) > _MAX_ID):
        raise ValidationFailed("before: not a cursor", field="before")
    filters = JobFilters(
        statuses=[JobStatus(status)] if status else None,
        queue=_text(params.get("queue", ""), "queue", 200),
        handler=_text(params.get("handler", ""), "handler", 200),
        created_from=_instant(params.get("from", ""), "from"),
        created_to=_instant(params.get("to", ""), "to"),
        error_fingerprint=_text(params.get("fingerprint", ""), "fingerprint", 64),
    )
    return filters, int(before) if before else None


@router.get("/p/{project_id}/jobs")
async def jobs(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        params = {k: v for k, v in request.query_params.items() if k != "before"}
        form = {k: params.get(k, "") for k in FILTER_KEYS}
        kept = {k: v for k, v in form.items() if v}
        q = request.query_params
        # The counts a bulk action redirected here with (console.py), shown once.
        bulk = None
        if q.get("bulk"):
            bulk = {
                "action": q.get("bulk", ""),
                "matched": q.get("matched", ""),
                "changed": q.get("changed", ""),
                "truncated": bool(q.get("truncated")),
            }
        common = ctx.base(
            statuses=[s.value for s in JobStatus],
            bulk=bulk,
            f=form,
            rows=[],
            older=None,
            newest=kept,
            paged=False,
            error=None,
        )
        try:
            filters, before = parse_filters(dict(request.query_params))
        except ValidationFailed as exc:
            return render("jobs.html", 422, **{**common, "error": exc.message})
        page = await read_models.list_jobs(
            ctx.conn, ctx.project_id, filters, before_id=before, limit=PAGE_SIZE
        )
        older = None
        if page.next_key is not None:
            older = {**kept, "before": str(page.next_key)}
        return render(
            "jobs.html",
            **{
                **common,
                "rows": page.items,
                "older": older,
                "error": None,
                "paged": before is not None,
            },
        )

    return await _handle(request, build, project_id=project_id)


# ----------------------------------------------------------------------------- job detail


async def job_context(ctx: Ctx, raw_job_id: str) -> dict[str, Any]:
    job_id = JobId(_id(raw_job_id, "job"))
    job = await read_models.get_job(ctx.conn, ctx.project_id, job_id)
    executions = await read_models.list_executions(ctx.conn, ctx.project_id, job_id, limit=100)
    # Logs newest first; "Older lines" pages back with ?logs_before=<id> (keyset).
    raw_before = ctx.request.query_params.get("logs_before", "")
    before = int(raw_before) if raw_before.isdigit() and int(raw_before) <= _MAX_ID else None
    logs = await job_logs.newest_first(
        ctx.conn, ctx.project_id, job_id, before_id=before, limit=LOG_PAGE
    )
    settings = ctx.request.app.state.settings
    found = await why.explain(
        ctx.conn,
        ctx.project_id,
        job_id,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        reaper_interval_s=settings.reaper_interval_s,
    )
    status = JobStatus(job["status"])
    return ctx.base(
        job=job,
        parents=await workflows.parents(ctx.conn, ctx.project_id, job_id),
        in_workflow=await workflows.in_workflow(ctx.conn, job_id),
        executions=executions.items,
        logs=logs.items,
        logs_older=logs.next_key,
        logs_paged=before is not None,
        request_logs_before=before,
        # The panel is for jobs that are neither running normally nor finished successfully
        # (running on a worker whose event loop a handler blocks is not normal).
        reasons=[r for r in found.reasons if not _unremarkable(r)],
        # Actions are in the polled fragment, so they follow the job's state (no stale Cancel).
        cancellable=status in operator_sources("cancel") and job["cancel_requested_at"] is None,
        # A job the dependency failure policy cancelled comes back by its parent's retry; the
        # why panel says which.
        retryable=status in operator_sources("retry")
        and not actions.cancelled_by_dependency(job["cancel_reason"]),
        runnable=status in operator_sources("run_now"),
    )


def _unremarkable(reason: why.Reason) -> bool:
    if reason.code == "running":
        return reason.details.get("loop_stall") is None
    return reason.code == "finished"


@router.get("/p/{project_id}/jobs/{job_id}")
async def job_detail(request: Request, project_id: str, job_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("job.html", **await job_context(ctx, job_id))

    return await _handle(request, build, project_id=project_id)


@router.get("/partials/p/{project_id}/jobs/{job_id}")
async def job_partial(request: Request, project_id: str, job_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("_job.html", **await job_context(ctx, job_id))

    return await _handle(request, build, project_id=project_id, partial=True)


@router.post("/p/{project_id}/jobs/{job_id}/cancel")
async def job_cancel(request: Request, project_id: str, job_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        jid = JobId(_id(job_id, "job"))
        row = await transitions.cancel(ctx.conn, ctx.project_id, jid)
        job = await read_models.get_job(ctx.conn, ctx.project_id, jid)  # 404 if not this project's
        await live.notify(ctx.conn, "job", int(job["queue_id"]), jid)
        if row is None:
            context = await job_context(ctx, job_id)
            context["error"] = (
                f"The job is already {job['status']}; only unfinished jobs can be cancelled."
            )
            return render("job.html", 409, **context)
        done = "cancelled" if job["status"] == JobStatus.CANCELLED else "cancel_requested"
        return _see_other(f"/p/{ctx.project_id}/jobs/{jid}?done={done}")

    return await _handle(request, build, project_id=project_id, min_role=Role.MEMBER)


# ----------------------------------------------------------------------------- workers


async def workers_context(ctx: Ctx) -> dict[str, Any]:
    page = await read_models.list_workers(ctx.conn, ctx.project_id, limit=200)
    return ctx.base(workers=page.items)


@router.get("/p/{project_id}/workers")
async def workers(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("workers.html", **await workers_context(ctx))

    return await _handle(request, build, project_id=project_id)


@router.get("/partials/p/{project_id}/workers")
async def workers_partial(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("_workers.html", **await workers_context(ctx))

    return await _handle(request, build, project_id=project_id, partial=True)


# ----------------------------------------------------------------------------- schedules


@router.get("/p/{project_id}/schedules")
async def schedule_list(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        page = await read_models.list_schedules(ctx.conn, ctx.project_id, limit=200)
        for s in page.items:
            s["words"] = describe(s["cron"])  # "At 09:00, Monday through Friday"
            try:
                s["preview"] = await schedules.preview(ctx.conn, s["cron"], s["timezone"], 3)
                s["preview_error"] = None
            except ValidationFailed as exc:
                s["preview"], s["preview_error"] = [], exc.message
        return render("schedules.html", **ctx.base(schedules=page.items))

    return await _handle(request, build, project_id=project_id)


# ----------------------------------------------------------------------------- dead letters


async def dlq_context(
    ctx: Ctx, errors: dict[int, str] | None = None, drafts: dict[int, str] | None = None
) -> dict[str, Any]:
    before = ctx.request.query_params.get("before", "")
    # Waiting letters by default (the overview's count); replayed ones on their own tab.
    show_replayed = ctx.request.query_params.get("show") == "replayed"
    page = await read_models.list_dead_letters(
        ctx.conn,
        ctx.project_id,
        replayed=show_replayed,
        before_id=int(before) if before.isdigit() and int(before) <= _MAX_ID else None,
        limit=25,
    )
    # The editors' payloads in one read (not one query per letter shown).
    payloads = await read_models.dead_letter_payloads(
        ctx.conn, ctx.project_id, [int(row["id"]) for row in page.items]
    )
    for row in page.items:
        row["payload_text"] = (drafts or {}).get(row["id"], pretty_json(payloads[row["id"]]))
    latest = await read_models.list_dead_letters(ctx.conn, ctx.project_id, limit=10)
    return ctx.base(
        letters=page.items,
        older=page.next_key,
        errors=errors or {},
        latest=latest.items,
        show_replayed=show_replayed,
        counts=await dlq.counts(ctx.conn, ctx.project_id),
    )


def parse_payload(raw: object) -> Any:
    """The payload typed into the editor, or ValidationFailed saying what is wrong with it."""
    text = raw if isinstance(raw, str) else ""
    if len(text.encode()) > limits.MAX_PAYLOAD_BYTES * 2:
        # Far too big even with indentation stripped: refuse before parsing megabytes.
        raise ValidationFailed(
            f"payload is larger than {limits.MAX_PAYLOAD_BYTES // 1024} KB", field="payload"
        )
    try:
        value = json.loads(text)
    except ValueError as exc:
        where = getattr(exc, "lineno", None), getattr(exc, "colno", None)
        at = f" at line {where[0]}, column {where[1]}" if where[0] is not None else ""
        raise ValidationFailed(f"payload is not valid JSON{at}", field="payload") from None
    reject_nul(value, "payload")
    return value


@router.get("/p/{project_id}/dlq")
async def dlq_list(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return render("dlq.html", **await dlq_context(ctx))

    return await _handle(request, build, project_id=project_id)


async def _dlq_action(
    request: Request,
    project_id: str,
    dlq_id: str,
    min_role: Role,
    act: Callable[[Ctx, int], Awaitable[Response]],
) -> Response:
    async def build(ctx: Ctx) -> Response:
        letter_id = _id(dlq_id, "dead letter")
        try:
            return await act(ctx, letter_id)
        except ValidationFailed as exc:
            # Nothing was changed; show the page again with the text as typed and the reason.
            assert ctx.form is not None
            draft = ctx.form.get("payload")
            context = await dlq_context(
                ctx,
                errors={letter_id: exc.message},
                drafts={letter_id: draft} if isinstance(draft, str) else None,
            )
            return render("dlq.html", 422, **context)

    return await _handle(request, build, project_id=project_id, min_role=min_role)


@router.post("/p/{project_id}/dlq/{dlq_id}/payload")
async def dlq_save(request: Request, project_id: str, dlq_id: str) -> Response:
    async def act(ctx: Ctx, letter_id: int) -> Response:
        assert ctx.form is not None
        payload = parse_payload(ctx.form.get("payload"))
        await dlq.update_payload(ctx.conn, ctx.project_id, letter_id, payload)
        await live.notify(ctx.conn, "dlq", None)
        return _see_other(f"/p/{ctx.project_id}/dlq?done=saved#dlq-{letter_id}")

    return await _dlq_action(request, project_id, dlq_id, Role.MEMBER, act)


@router.post("/p/{project_id}/dlq/{dlq_id}/replay")
async def dlq_replay(request: Request, project_id: str, dlq_id: str) -> Response:
    async def act(ctx: Ctx, letter_id: int) -> Response:
        assert ctx.form is not None
        raw = ctx.form.get("payload")
        payload = parse_payload(raw) if isinstance(raw, str) else None
        await enforce_enqueue_limit(ctx.conn, ctx.project_id, 1)  # a replay is an enqueue
        job = await dlq.replay(ctx.conn, ctx.project_id, letter_id, payload=payload)
        return _see_other(f"/p/{ctx.project_id}/jobs/{job['id']}?done=replayed")

    return await _dlq_action(request, project_id, dlq_id, Role.MEMBER, act)


@router.post("/p/{project_id}/dlq/{dlq_id}/delete")
async def dlq_delete(request: Request, project_id: str, dlq_id: str) -> Response:
    async def act(ctx: Ctx, letter_id: int) -> Response:
        await dlq.delete(ctx.conn, ctx.project_id, letter_id)
        await live.notify(ctx.conn, "dlq", None)
        return _see_other(f"/p/{ctx.project_id}/dlq?done=deleted")

    return await _dlq_action(request, project_id, dlq_id, Role.ADMIN, act)
