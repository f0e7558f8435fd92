"""`jobyard jobs why|retry|run-now|bulk`: explain a job, act on one, or on every job of a filter.

Added to the `jobs` group of `jobyard.commands.jobs` (which lists, shows and cancels).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape

from jobyard.commands.common import (
    DataDir,
    ProjectOpt,
    fail,
    load_settings,
    out,
)
from jobyard.commands.jobs import JobIdArg, jobs_app, unknown_job
from jobyard.commands.scope import run_in_project
from jobyard.core import actions, why
from jobyard.core.read_models import JobFilters
from jobyard.db.pool import Conn
from jobyard.domain.enums import JobStatus
from jobyard.domain.errors import NotFound
from jobyard.domain.ids import JobId, ProjectId
from jobyard.domain.settings import Settings

T = TypeVar("T")


def _run(
    project: str | None,
    data_dir: Any,
    body: Callable[[Conn, ProjectId], Awaitable[T]],
    job_id: int | None = None,
    settings: Settings | None = None,
) -> T:
    """Run `body` in the project; with `job_id`, a job that is not the project's gets the same
    error as `jobs show` and `jobs cancel`."""

    async def guarded(conn: Conn, pid: ProjectId) -> T:
        try:
            return await body(conn, pid)
        except NotFound:
            if job_id is None:
                raise
            raise unknown_job(job_id) from None

    return run_in_project(project, data_dir, guarded, settings)


@jobs_app.command("why")
def why_cmd(job_id: JobIdArg, project: ProjectOpt = None, data_dir: DataDir = None) -> None:
    """Why isn't this job running? One line per reason: code, sentence, and when it ends."""
    # The workers' heartbeat and the reaper's interval decide when a holder counts as silent.
    settings = load_settings(data_dir=data_dir)

    async def body(conn: Conn, pid: ProjectId) -> why.Explanation:
        return await why.explain(
            conn,
            pid,
            JobId(job_id),
            heartbeat_interval_s=settings.heartbeat_interval_s,
            reaper_interval_s=settings.reaper_interval_s,
        )

    found = _run(project, data_dir, body, job_id, settings)
    out.print(f"job {found.job_id} is {found.status.value}")
    for r in found.reasons:
        ends = f" (until {r.ends_at:%Y-%m-%d %H:%M:%S} UTC)" if r.ends_at else ""
        out.print(f"- [bold]{r.code}[/]: {escape(r.sentence)}{ends}", markup=True, highlight=False)


def _one(action: actions.Action, done: str) -> Callable[..., None]:
    def command(job_id: JobIdArg, project: ProjectOpt = None, data_dir: DataDir = None) -> None:
        async def body(conn: Conn, pid: ProjectId) -> None:
            await actions.act_on_job(conn, pid, action, JobId(job_id))

        _run(project, data_dir, body, job_id)
        out.print(f"job {job_id} {done}")

    return command


@jobs_app.command("retry")
def retry_cmd(job_id: JobIdArg, project: ProjectOpt = None, data_dir: DataDir = None) -> None:
    """Retry now: a failed, dead-lettered or cancelled job → queued. The jobs that waited on it
    and were cancelled because it failed wait again, so its workflow continues."""

    async def body(conn: Conn, pid: ProjectId) -> actions.Retried:
        return await actions.retry_job(conn, pid, JobId(job_id))

    done = _run(project, data_dir, body, job_id)
    line = f"job {job_id} queued again"
    if done.revived:
        line += f"; {_ids(done.revived)} waiting again"
    out.print(line, highlight=False)
    if done.still_blocked:
        out.print(
            f"{_ids(done.still_blocked)} cancelled again: another parent failed too",
            highlight=False,
        )


def _ids(ids: list[int]) -> str:
    return ("job " if len(ids) == 1 else "jobs ") + ", ".join(str(i) for i in ids)


jobs_app.command("run-now", help="Run now: a scheduled job → queued at once.")(
    _one("run_now", "queued to run now")
)


@jobs_app.command("bulk")
def bulk_cmd(
    action: Annotated[str, typer.Argument(help="cancel, retry, run_now or delete.")],
    status: Annotated[list[str] | None, typer.Option("--status", "-s")] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q")] = None,
    handler: Annotated[str | None, typer.Option("--handler")] = None,
    fingerprint: Annotated[str | None, typer.Option("--fingerprint")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do it (without: only count).")] = False,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """Apply an action to every job a filter selects, in batches of 500; prints the counts.
    Without --yes nothing changes: it prints how many jobs the action would touch."""
    if action not in actions.ACTIONS:
        raise fail(f"action must be one of {', '.join(actions.ACTIONS)}", "e.g. bulk retry")
    bad = [s for s in status or [] if s not in {x.value for x in JobStatus}]
    if bad:
        raise fail(f"--status {bad[0]!r} is not a job status")
    filters = JobFilters(
        statuses=[JobStatus(s) for s in status] if status else None,
        queue=queue,
        handler=handler,
        error_fingerprint=fingerprint,
    )
    act: Any = action

    async def body(conn: Conn, pid: ProjectId) -> actions.BulkResult:
        if not yes:
            # A dry run: count in one transaction that is rolled back.
            try:
                async with conn.transaction():
                    result = await actions.bulk(conn, pid, act, filters)
                    raise _DryRun(result)
            except _DryRun as dry:
                return dry.result
        return await actions.bulk(conn, pid, act, filters)

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
