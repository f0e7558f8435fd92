"""`jobyard schedules list|pause ID|resume ID|run-now ID|preview EXPR`: the project's cron
schedules, steered, and the next fire times of a cron expression."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from jobyard.commands import render
from jobyard.commands.common import DataDir, ProjectOpt, fail, out, typer_app
from jobyard.commands.guide_files import see
from jobyard.commands.scope import run_in_project
from jobyard.core import read_models, schedules
from jobyard.core.cron import next_fires, parse_cron
from jobyard.db.pool import Conn
from jobyard.domain.errors import NotFound, ValidationFailed
from jobyard.domain.ids import ProjectId

schedules_app = typer_app(
    "Cron schedules of the project: list, pause, resume, run now; preview a cron's fire times."
)
IdArg = Annotated[int, typer.Argument(min=1, help="Schedule id (`jobyard schedules list`).")]


@schedules_app.command("list")
def schedules_list(project: ProjectOpt = None, data_dir: DataDir = None) -> None:
    """List the project's schedules: cron and timezone, what they enqueue, next and last fire."""

    async def work(conn: Conn, pid: ProjectId) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        after: int | None = None
        while True:  # a project has few schedules; follow the pages
            page = await read_models.list_schedules(conn, pid, after_id=after, limit=200)
            found.extend(page.items)
            if page.next_key is None:
                return found
            after = page.next_key

    rows = run_in_project(project, data_dir, work)
    table = Table("id", "name", "cron", "timezone", "handler", "queue", "state", "next fire",
                  "last fired", "overlap")  # fmt: skip
    for row in rows:
        table.add_row(
            str(row["id"]), row["name"], row["cron"], row["timezone"], row["handler"],
            row["queue"], "active" if row["enabled"] else "paused",
            render.when(row["next_run_at"]), render.when(row["last_fired_at"]), row["overlap"],
        )  # fmt: skip
    out.print(table)
    if not rows:
        out.print("no schedules (create them in the dashboard or with POST /schedules)")


@schedules_app.command("pause")
def schedules_pause(
    schedule_id: IdArg, project: ProjectOpt = None, data_dir: DataDir = None
) -> None:
    """Pause a schedule: it fires no more until resumed (the jobs it made are left alone)."""
    row = _on_schedule(project, data_dir, schedule_id, _set_enabled(schedule_id, False))
    out.print(f"schedule {schedule_id} {row['name']!r} paused", highlight=False)


@schedules_app.command("resume")
def schedules_resume(
    schedule_id: IdArg, project: ProjectOpt = None, data_dir: DataDir = None
) -> None:
    """Resume a paused schedule from its next fire time after now (missed fires are skipped)."""
    row = _on_schedule(project, data_dir, schedule_id, _set_enabled(schedule_id, True))
    out.print(
        f"schedule {schedule_id} {row['name']!r} resumed; next fire "
        f"{render.when(row['next_run_at'])} UTC",
        highlight=False,
    )


@schedules_app.command("run-now")
def schedules_run_now(
    schedule_id: IdArg, project: ProjectOpt = None, data_dir: DataDir = None
) -> None:
    """Fire a schedule once, now (its cron timing stays as it is); prints the new job's id."""

    async def fire(conn: Conn, pid: ProjectId) -> int:
        return int(await schedules.trigger_now(conn, pid, schedule_id))

    job_id = _on_schedule(project, data_dir, schedule_id, fire)
    out.print(f"schedule {schedule_id} fired: job {job_id}", highlight=False)


def _set_enabled(
    schedule_id: int, enabled: bool
) -> Callable[[Conn, ProjectId], Awaitable[dict[str, Any]]]:
    async def change(conn: Conn, pid: ProjectId) -> dict[str, Any]:
        return await schedules.update_schedule(conn, pid, schedule_id, {"enabled": enabled})

    return change


def _on_schedule(
    project: str | None, data_dir: Any, schedule_id: int, body: Callable[[Conn, ProjectId], Any]
) -> Any:
    """Run `body`; a schedule that is not the project's is named with the way to find ids."""

    async def guarded(conn: Conn, pid: ProjectId) -> Any:
        try:
            return await body(conn, pid)
        except NotFound as exc:
            if exc.details.get("field") not in (None, "schedule_id"):
                raise
            raise NotFound(
                f"schedule {schedule_id} does not exist in this project; `jobyard schedules "
                "list` shows the ids",
                field="schedule_id",
            ) from None

    return run_in_project(project, data_dir, guarded)


@schedules_app.command("preview")
def schedules_preview(
    expr: Annotated[str, typer.Argument(help='Cron expression, e.g. "0 9 * * 1-5".')],
    tz: Annotated[str, typer.Option("--tz", help="IANA timezone, e.g. Asia/Kolkata.")] = "UTC",
    n: Annotated[int, typer.Option("-n", min=1, max=100, help="How many fire times.")] = 5,
    seconds: Annotated[
        bool, typer.Option("--seconds", help="The expression has a leading seconds field.")
    ] = False,
    after: Annotated[
        str | None, typer.Option("--after", help="Start after this ISO time (default: now).")
    ] = None,
) -> None:
    """Print the next N fire times of a cron expression (local time and UTC)."""
    try:
        spec = parse_cron(expr, tz, seconds=True if seconds else None)
        start = _parse_after(after)
        fires = next_fires(spec, start, n)
    except ValidationFailed as exc:
        raise fail(exc.message, see("SCHEDULER", "for the cron syntax and DST rules")) from None
    zone = spec.zone
    for fire in fires:
        local = fire.astimezone(zone)
        out.print(
            f"{local:%Y-%m-%d %a %H:%M:%S} {local.tzname()} ({local:%z})"
            f"  =  {fire:%Y-%m-%dT%H:%M:%S}Z"
        )
    if len(fires) < n:
        out.print(
            f"({len(fires)} of {n}: no later fire time within 50 years, "
            "or before the calendar ends at 9999-12-31)",
            highlight=False,
        )


def _parse_after(after: str | None) -> datetime:
    if after is None:
        return datetime.now(UTC)  # a preview only; the scheduler itself uses the database clock
    try:
        value = datetime.fromisoformat(after.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationFailed(f"--after: not an ISO 8601 time: {after!r}", field="after") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
