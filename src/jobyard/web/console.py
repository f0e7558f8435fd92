"""Dashboard pages and actions of the operator console: job actions (retry now, run now), bulk
actions on an explorer filter, failure groups, schedule editing, queue settings.

Same rules as pages.py (whose request plumbing this module uses): every page resolves the
session, applies the API guard's role rule, CSRF-checks every POST before reading or changing
anything, and calls core only. Every bulk action first shows a confirmation page that names how
many jobs it will touch; the POST from that page does it in bounded batches.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from jobyard.api.ratelimit import enforce_enqueue_limit
from jobyard.core import actions, admin, failures, read_models, schedules
from jobyard.core.auth import PermissionDenied
from jobyard.core.cron_words import describe
from jobyard.domain.enums import OverlapPolicy, Role
from jobyard.domain.errors import IllegalTransition, JobyardError, NotFound, ValidationFailed
from jobyard.domain.ids import JobId, QueueId
from jobyard.domain.lifecycle import operator_sources
from jobyard.web.pages import (
    FILTER_KEYS,
    Ctx,
    _handle,
    _id,
    _see_other,
    job_context,
    parse_filters,
    parse_payload,
    pretty_json,
    queue_context,
    render,
)

router = APIRouter(include_in_schema=False)
BULK_ACTIONS: Final = {
    "cancel": ("Cancel", Role.MEMBER),
    "retry": ("Retry now", Role.MEMBER),
    "run_now": ("Run now", Role.MEMBER),
    "delete": ("Delete", Role.ADMIN),
}
_FP_CHARS: Final = frozenset("0123456789abcdef")


def _form(ctx: Ctx, name: str) -> str:
    assert ctx.form is not None
    value = ctx.form.get(name)
    return value if isinstance(value, str) else ""


# ----------------------------------------------------------------------------- one job


async def _job_action(
    request: Request, project_id: str, job_id: str, action: actions.Action, done: str
) -> Response:
    async def build(ctx: Ctx) -> Response:
        jid = JobId(_id(job_id, "job"))
        try:
            await actions.act_on_job(ctx.conn, ctx.project_id, action, jid)
        except IllegalTransition as exc:
            context = await job_context(ctx, job_id)
            context["error"] = exc.message
            return render("job.html", 409, **context)
        return _see_other(f"/p/{ctx.project_id}/jobs/{jid}?done={done}")

    return await _handle(request, build, project_id=project_id, min_role=Role.MEMBER)


@router.post("/p/{project_id}/jobs/{job_id}/retry")
async def job_retry(request: Request, project_id: str, job_id: str) -> Response:
    return await _job_action(request, project_id, job_id, "retry", "retried")


@router.post("/p/{project_id}/jobs/{job_id}/run-now")
async def job_run_now(request: Request, project_id: str, job_id: str) -> Response:
    return await _job_action(request, project_id, job_id, "run_now", "run_now")


# ----------------------------------------------------------------------------- bulk on a filter


def _bulk_action(raw: str) -> actions.Action:
    if raw not in BULK_ACTIONS:
        raise ValidationFailed(f"action: one of {', '.join(BULK_ACTIONS)}", field="action")
    action: actions.Action = raw  # type: ignore[assignment]
    return action


def _filter_params(source: Any) -> dict[str, str]:
    return {k: str(source.get(k) or "") for k in FILTER_KEYS if source.get(k)}


@router.get("/p/{project_id}/jobs-bulk")
async def bulk_confirm(request: Request, project_id: str) -> Response:
    """The confirmation: what the action does, to how many jobs of this filter."""

    async def build(ctx: Ctx) -> Response:
        action = _bulk_action(request.query_params.get("action", ""))
        label, role = BULK_ACTIONS[action]
        kept = _filter_params(request.query_params)
        filters, _ = parse_filters(kept)
        n = await actions.count(ctx.conn, ctx.project_id, action, filters)
        return render(
            "confirm.html",
            **ctx.base(
                title=f"{label}: {n} job{'s' if n != 1 else ''}",
                count=n,
                what=(
                    f"{label} every job of this filter it applies to "
                    f"({', '.join(sorted(s.value for s in operator_sources(action)))})."
                ),
                filters=kept,
                action_url=f"/p/{ctx.project_id}/jobs-bulk",
                hidden={"action": action, **kept},
                button=f"{label} {n} job{'s' if n != 1 else ''}",
                danger=action in ("cancel", "delete"),
                back=f"/p/{ctx.project_id}/jobs?{urlencode(kept)}",
                allowed=ctx.can(role.value),
            ),
        )

    return await _handle(request, build, project_id=project_id)


@router.post("/p/{project_id}/jobs-bulk")
async def bulk_apply(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        action = _bulk_action(_form(ctx, "action"))
        if not ctx.can(BULK_ACTIONS[action][1].value):
            raise PermissionDenied(f"{action} needs the {BULK_ACTIONS[action][1]} role")
        assert ctx.form is not None
        kept = _filter_params(ctx.form)
        filters, _ = parse_filters(kept)
        result = await actions.bulk(ctx.conn, ctx.project_id, action, filters)
        summary = {
            "bulk": action,
            "matched": str(result.matched),
            "changed": str(result.changed),
            **({"truncated": "1"} if result.truncated else {}),
        }
        return _see_other(f"/p/{ctx.project_id}/jobs?{urlencode({**kept, **summary})}")

    return await _handle(request, build, project_id=project_id, min_role=Role.MEMBER)


# ----------------------------------------------------------------------------- failure groups


def _spark(trend: list[int]) -> list[int]:
    top = max([*trend, 1])
    return [round(20 * n / top) for n in trend]


def _fingerprint(raw: str) -> str:
    if not raw or len(raw) > 64 or not set(raw) <= _FP_CHARS:
        raise NotFound("no failing jobs have this fingerprint")
    return raw


@router.get("/p/{project_id}/failures")
async def failure_groups(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        raw = request.query_params.get("fingerprint", "")
        fingerprint = _fingerprint(raw) if raw else None
        groups = await failures.list_groups(
            ctx.conn, ctx.project_id, fingerprint=fingerprint, limit=failures.MAX_GROUPS
        )
        for g in groups:
            g["spark"] = _spark(g["trend"])
        done = request.query_params
        result = None
        if done.get("group_action"):
            result = {k: done.get(k, "") for k in ("group_action", "matched", "changed")}
        return render(
            "failures.html",
            **ctx.base(groups=groups, only=fingerprint, result=result),
        )

    return await _handle(request, build, project_id=project_id)


GROUP_ACTIONS: Final = {"retry": ("Retry", Role.MEMBER), "discard": ("Discard", Role.ADMIN)}


@router.get("/p/{project_id}/failures/{fingerprint}/{action}")
async def group_confirm(
    request: Request, project_id: str, fingerprint: str, action: str
) -> Response:
    async def build(ctx: Ctx) -> Response:
        if action not in GROUP_ACTIONS:
            raise NotFound("no such action")
        group = await failures.get_group(ctx.conn, ctx.project_id, _fingerprint(fingerprint))
        label, role = GROUP_ACTIONS[action]
        n = int(group["count"])
        what = (
            "Queue every job of this group again now (dead-lettered and failed jobs are "
            "retried; jobs backing off run now)."
            if action == "retry"
            else "Delete every job of this group and its dead letters. This cannot be undone."
        )
        return render(
            "confirm.html",
            **ctx.base(
                title=f"{label} {n} job{'s' if n != 1 else ''} with this error",
                count=n,
                what=what,
                filters={"fingerprint": fingerprint, "sample error": group["sample_error"] or ""},
                action_url=f"/p/{ctx.project_id}/failures/{fingerprint}/{action}",
                hidden={},
                button=f"{label} {n} job{'s' if n != 1 else ''}",
                danger=action == "discard",
                back=f"/p/{ctx.project_id}/failures",
                allowed=ctx.can(role.value),
            ),
        )

    return await _handle(request, build, project_id=project_id)


async def _group_apply(
    request: Request, project_id: str, fingerprint: str, action: str
) -> Response:
    async def build(ctx: Ctx) -> Response:
        fp = _fingerprint(fingerprint)
        await failures.get_group(ctx.conn, ctx.project_id, fp)
        group_action: actions.GroupAction = "retry" if action == "retry" else "discard"
        result = await actions.group_action(ctx.conn, ctx.project_id, fp, group_action)
        summary = {
            "group_action": action,
            "matched": str(result.matched),
            "changed": str(result.changed),
        }
        return _see_other(f"/p/{ctx.project_id}/failures?{urlencode(summary)}")

    role = GROUP_ACTIONS[action][1]
    return await _handle(request, build, project_id=project_id, min_role=role)


@router.post("/p/{project_id}/failures/{fingerprint}/retry")
async def group_retry(request: Request, project_id: str, fingerprint: str) -> Response:
    return await _group_apply(request, project_id, fingerprint, "retry")


@router.post("/p/{project_id}/failures/{fingerprint}/discard")
async def group_discard(request: Request, project_id: str, fingerprint: str) -> Response:
    return await _group_apply(request, project_id, fingerprint, "discard")


# ----------------------------------------------------------------------------- schedules


def _optional_int(raw: str, name: str) -> int | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValidationFailed(f"{name}: a whole number", field=name) from None


def _schedule_values(ctx: Ctx) -> dict[str, Any]:
    """The schedule form as ScheduleFields values (core validates every one of them)."""
    raw_payload = _form(ctx, "payload").strip() or "{}"
    return {
        "name": _form(ctx, "name").strip(),
        "queue_id": _optional_int(_form(ctx, "queue_id"), "queue_id") or 0,
        "cron": _form(ctx, "cron").strip(),
        "timezone": _form(ctx, "timezone").strip() or "UTC",
        "handler": _form(ctx, "handler").strip(),
        "payload": parse_payload(raw_payload),
        "priority": _optional_int(_form(ctx, "priority"), "priority") or 0,
        "max_attempts": _optional_int(_form(ctx, "max_attempts"), "max_attempts"),
        "overlap": _form(ctx, "overlap") or OverlapPolicy.ALLOW.value,
        "enabled": _form(ctx, "enabled") == "on",
    }


async def _schedule_form(
    ctx: Ctx, schedule: dict[str, Any] | None, status: int = 200, error: str | None = None
) -> Response:
    queues = await read_models.list_queues(ctx.conn, ctx.project_id, limit=500)
    values: dict[str, Any] = {
        "name": "", "cron": "", "timezone": "UTC", "queue_id": "", "handler": "",
        "payload": "{}", "priority": 0, "max_attempts": None, "overlap": "allow", "enabled": True,
    }  # fmt: skip
    values.update(schedule or {})
    if ctx.form is not None:  # a refused submission shows what was typed
        values.update({k: _form(ctx, k) for k in ("name", "cron", "timezone", "handler",
                                                  "payload", "priority", "max_attempts",
                                                  "overlap", "queue_id")})  # fmt: skip
        values["enabled"] = _form(ctx, "enabled") == "on"
    elif schedule is not None:
        values["payload"] = pretty_json(schedule["payload"])
    return render(
        "schedule_form.html",
        status,
        **ctx.base(
            s=values,
            editing=schedule is not None and "id" in schedule,
            queues=queues.items,
            overlaps=[p.value for p in OverlapPolicy],
            error=error,
            words=describe(str(values.get("cron") or "")) if values.get("cron") else "",
        ),
    )


@router.get("/p/{project_id}/schedules/new")
async def schedule_new(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        return await _schedule_form(ctx, None)

    return await _handle(request, build, project_id=project_id, min_role=Role.ADMIN)


@router.post("/p/{project_id}/schedules/new")
async def schedule_create(request: Request, project_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        try:
            fields = schedules.ScheduleFields.from_mapping(_schedule_values(ctx))
            row = await schedules.create_schedule(ctx.conn, ctx.project_id, fields)
        except ValidationFailed as exc:
            return await _schedule_form(ctx, None, 422, exc.message)
        except JobyardError as exc:  # Conflict (name taken), NotFound (queue): on the form
            return await _schedule_form(ctx, None, 409, exc.message)
        return _see_other(f"/p/{ctx.project_id}/schedules?done=created#schedule-{row['id']}")

    return await _handle(request, build, project_id=project_id, min_role=Role.ADMIN)


@router.get("/p/{project_id}/schedules/{schedule_id}/edit")
async def schedule_edit(request: Request, project_id: str, schedule_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        row = await read_models.get_schedule(ctx.conn, ctx.project_id, _id(schedule_id, "schedule"))
        return await _schedule_form(ctx, row)

    return await _handle(request, build, project_id=project_id, min_role=Role.ADMIN)


@router.post("/p/{project_id}/schedules/{schedule_id}/edit")
async def schedule_update(request: Request, project_id: str, schedule_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        sid = _id(schedule_id, "schedule")
        row = await read_models.get_schedule(ctx.conn, ctx.project_id, sid)
        try:
            await schedules.update_schedule(ctx.conn, ctx.project_id, sid, _schedule_values(ctx))
        except ValidationFailed as exc:
            return await _schedule_form(ctx, row, 422, exc.message)
        except JobyardError as exc:
            return await _schedule_form(ctx, row, 409, exc.message)
        return _see_other(f"/p/{ctx.project_id}/schedules?done=updated#schedule-{sid}")

    return await _handle(request, build, project_id=project_id, min_role=Role.ADMIN)


async def _schedule_post(
    request: Request, project_id: str, schedule_id: str, what: str, role: Role
) -> Response:
    async def build(ctx: Ctx) -> Response:
        sid = _id(schedule_id, "schedule")
        if what == "toggle":
            row = await read_models.get_schedule(ctx.conn, ctx.project_id, sid)
            await schedules.update_schedule(
                ctx.conn, ctx.project_id, sid, {"enabled": not row["enabled"]}
            )
            done = "disabled" if row["enabled"] else "enabled"
        elif what == "delete":
            await schedules.delete_schedule(ctx.conn, ctx.project_id, sid)
            done = "schedule_deleted"
        else:
            await enforce_enqueue_limit(ctx.conn, ctx.project_id, 1)  # a fire is an enqueue
            job_id = await schedules.trigger_now(ctx.conn, ctx.project_id, sid)
            return _see_other(f"/p/{ctx.project_id}/jobs/{job_id}?done=triggered")
        return _see_other(f"/p/{ctx.project_id}/schedules?done={done}")

    return await _handle(request, build, project_id=project_id, min_role=role)


@router.post("/p/{project_id}/schedules/{schedule_id}/toggle")
async def schedule_toggle(request: Request, project_id: str, schedule_id: str) -> Response:
    return await _schedule_post(request, project_id, schedule_id, "toggle", Role.ADMIN)


@router.post("/p/{project_id}/schedules/{schedule_id}/delete")
async def schedule_delete(request: Request, project_id: str, schedule_id: str) -> Response:
    return await _schedule_post(request, project_id, schedule_id, "delete", Role.ADMIN)


@router.post("/p/{project_id}/schedules/{schedule_id}/trigger")
async def schedule_trigger(request: Request, project_id: str, schedule_id: str) -> Response:
    return await _schedule_post(request, project_id, schedule_id, "trigger", Role.MEMBER)


# ----------------------------------------------------------------------------- queue settings


@router.post("/p/{project_id}/queues/{queue_id}/settings")
async def queue_settings(request: Request, project_id: str, queue_id: str) -> Response:
    async def build(ctx: Ctx) -> Response:
        qid = QueueId(_id(queue_id, "queue"))
        changes = {
            "priority": _optional_int(_form(ctx, "priority"), "priority") or 0,
            "max_concurrency": _optional_int(_form(ctx, "max_concurrency"), "max_concurrency"),
            "retry_policy_id": _optional_int(_form(ctx, "retry_policy_id"), "retry_policy_id"),
        }
        try:
            await admin.update_queue(ctx.conn, ctx.project_id, qid, changes)
        except ValidationFailed as exc:
            context = await queue_context(ctx, queue_id)
            context["settings_error"] = exc.message
            return render("queue.html", 422, **context)
        return _see_other(f"/p/{ctx.project_id}/queues/{qid}?done=settings")

    return await _handle(request, build, project_id=project_id, min_role=Role.ADMIN)
