"""`jobyard jobs …` operator commands: why, retry, run-now, cancel, bulk.

Registered from cli.py as the `jobs` group (`jobyard jobs` alone still lists the newest jobs).
Each command resolves the project like the worker does (`--project` or JOBYARD_PROJECT) and
calls core directly: the CLI is an operator on the database, as the API is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from jobyard.core import actions, projects, why
from jobyard.core.read_models import JobFilters
from jobyard.db.pool import CONNECTION_ERRORS, Conn, connect, resolve_database_url
from jobyard.domain.enums import JobStatus
from jobyard.domain.errors import JobyardError
from jobyard.domain.ids import JobId, ProjectId
from jobyard.domain.settings import Settings

jobs_app = typer.Typer(
    help="Jobs: list (no subcommand), explain, retry, run now, cancel, bulk actions."
)
out = Console()
T = TypeVar("T")

Project = Annotated[
    str | None,
    typer.Option("--project", help="'org/project' or a project id (default: JOBYARD_PROJECT)."),
]
DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="Where the embedded PostgreSQL keeps its data.")
]
JobArg = Annotated[int, typer.Argument(min=1, help="The job's id.")]


def _run(
    project: str | None, data_dir: Path | None, body: Callable[[Conn, ProjectId], Awaitable[T]]
) -> T:
    # cli.py imports this module: import its helpers when a command runs, not at import.
    from jobyard.cli import fail, load_settings

    settings: Settings = load_settings(data_dir=data_dir)
    url = resolve_database_url(settings)

    async def go() -> T:
        conn = await connect(url, autocommit=True)
        try:
            project_id = await projects.resolve_project(conn, project or settings.project)
            return await body(conn, project_id)
        finally:
            await conn.close()

    try:
        return asyncio.run(go())
    except JobyardError as exc:
        raise fail(exc.message) from None
    except CONNECTION_ERRORS as exc:
        raise fail(f"cannot reach the database ({type(exc).__name__})", "is it running?") from None


@jobs_app.command("why")
def why_cmd(job_id: JobArg, project: Project = None, data_dir: DataDir = None) -> None:
    """Why isn't this job running? One line per reason: code, sentence, and when it ends."""

    async def body(conn: Conn, project_id: ProjectId) -> why.Explanation:
        return await why.explain(conn, project_id, JobId(job_id))

    found = _run(project, data_dir, body)
    out.print(f"job {found.job_id} is {found.status.value}")
    for r in found.reasons:
        ends = f" (until {r.ends_at:%Y-%m-%d %H:%M:%S} UTC)" if r.ends_at else ""
        out.print(f"- [bold]{r.code}[/]: {r.sentence}{ends}", highlight=False)


def _one(action: actions.Action, done: str) -> Callable[..., None]:
    def command(job_id: JobArg, project: Project = None, data_dir: DataDir = None) -> None:
        async def body(conn: Conn, project_id: ProjectId) -> None:
            await actions.act_on_job(conn, project_id, action, JobId(job_id))

        _run(project, data_dir, body)
        out.print(f"job {job_id} {done}")

    return command


jobs_app.command("retry", help="Retry now: a failed, dead-lettered or cancelled job → queued.")(
    _one("retry", "queued again")
)
jobs_app.command("run-now", help="Run now: a scheduled job → queued at once.")(
    _one("run_now", "queued to run now")
)
jobs_app.command("cancel", help="Cancel a job (a running one: its worker is asked to stop).")(
    _one("cancel", "cancelled (or asked to stop)")
)


@jobs_app.command("bulk")
def bulk_cmd(
    action: Annotated[str, typer.Argument(help="cancel, retry, run_now or delete.")],
    status: Annotated[list[str] | None, typer.Option("--status", "-s")] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q")] = None,
    handler: Annotated[str | None, typer.Option("--handler")] = None,
    fingerprint: Annotated[str | None, typer.Option("--fingerprint")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do it (without: only count).")] = False,
    project: Project = None,
    data_dir: DataDir = None,
) -> None:
    """Apply an action to every job a filter selects, in batches of 500; prints the counts.
    Without --yes nothing changes: it prints how many jobs the action would touch."""
    if action not in actions.ACTIONS:
        from jobyard.cli import fail

        raise fail(f"action must be one of {', '.join(actions.ACTIONS)}", "e.g. bulk retry")
    bad = [s for s in status or [] if s not in {x.value for x in JobStatus}]
    if bad:
        from jobyard.cli import fail

        raise fail(f"--status {bad[0]!r} is not a job status")
    filters = JobFilters(
        statuses=[JobStatus(s) for s in status] if status else None,
        queue=queue,
        handler=handler,
        error_fingerprint=fingerprint,
    )
    act: Any = action

    async def body(conn: Conn, project_id: ProjectId) -> actions.BulkResult:
        if not yes:
            # A dry run: count in one transaction that is rolled back.
            try:
                async with conn.transaction():
                    result = await actions.bulk(conn, project_id, act, filters)
                    raise _DryRun(result)
            except _DryRun as dry:
                return dry.result
        return await actions.bulk(conn, project_id, act, filters)

    result = _run(project, data_dir, body)
    verb = "changed" if yes else "would change"
    more = " (stopped at the per-run cap: run it again)" if result.truncated else ""
    out.print(
        f"{action}: {result.matched} matched, {result.changed} {verb}, "
        f"{result.skipped} skipped{more}"
    )
    if not yes:
        out.print("nothing changed; add --yes to apply")


class _DryRun(Exception):
    def __init__(self, result: actions.BulkResult) -> None:
        self.result = result
