"""`jobyard jobs` (or `jobyard jobs list`), `jobyard jobs show ID`, `jobyard jobs cancel ID`.

`jobs_app` is the group other modules add subcommands to (`@jobs_app.command("why")`); the
CLI imports them before it runs, so they appear under `jobyard jobs`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from jobyard.commands import render
from jobyard.commands.common import (
    DataDir,
    ProjectOpt,
    clear_errors,
    load_settings,
    open_database,
    out,
    run_with_conn,
    typer_app,
)
from jobyard.commands.scope import project_id
from jobyard.core import read_models, transitions
from jobyard.db.pool import Conn
from jobyard.domain.errors import Conflict, NotFound
from jobyard.domain.ids import JobId
from jobyard.domain.settings import Settings
from jobyard.worker.commands import check_status, recent_jobs

jobs_app = typer_app(
    "List jobs (`jobyard jobs`), act on one (show, why, cancel, retry, run-now), "
    "or on every job of a filter (bulk).",
    no_args_is_help=False,
    invoke_without_command=True,
)
JobIdArg = Annotated[int, typer.Argument(min=1, help="The job id (as `jobyard jobs` lists it).")]
SHOWN_LOGS = 200


StatusOpt = Annotated[str | None, typer.Option("--status", "-s", help="e.g. queued, failed.")]
QueueOpt = Annotated[str | None, typer.Option("--queue", "-q", help="Queue name.")]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", min=1, max=1000)]


@jobs_app.callback()
def jobs_group(
    ctx: typer.Context,
    status: StatusOpt = None,
    queue: QueueOpt = None,
    limit: LimitOpt = 20,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """List the newest jobs (id, queue, handler, status, attempt, run_at, last_error)."""
    if ctx.invoked_subcommand is None:
        _list_jobs(status, queue, limit, project, data_dir)


# `jobyard jobs list` as well as `jobyard jobs`: queues and dlq list that way, and a user who
# typed `jobs list` got "No such command 'list'".
@jobs_app.command("list")
def jobs_list(
    status: StatusOpt = None,
    queue: QueueOpt = None,
    limit: LimitOpt = 20,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """List the newest jobs (id, queue, handler, status, attempt, run_at, last_error)."""
    _list_jobs(status, queue, limit, project, data_dir)


def _list_jobs(
    status: str | None,
    queue: str | None,
    limit: int,
    project: str | None,
    data_dir: Path | None,
) -> None:
    settings = load_settings(data_dir=data_dir)
    url = open_database(settings).url
    with clear_errors():
        check_status(status)  # before the project: a typo in --status is named first

    async def newest(conn: Conn) -> list[dict[str, Any]]:
        pid = await project_id(conn, settings, project)  # an unknown project is an error
        return await recent_jobs(conn, pid, status=status, queue=queue, limit=limit)

    rows = run_with_conn(url, newest)
    table = Table("id", "queue", "handler", "status", "attempt", "run_at", "last_error")
    for row in rows:
        table.add_row(
            str(row["id"]),
            row["queue"],
            row["handler"],
            row["status"],
            f"{row['attempt']}/{row['max_attempts']}",
            f"{row['run_at']:%Y-%m-%d %H:%M:%S}",
            render.clip(row["last_error"] or "", 60),
        )
    out.print(table)


@jobs_app.command("show")
def jobs_show(
    job_id: JobIdArg,
    logs: Annotated[
        int, typer.Option("--logs", min=0, max=10_000, help="Log lines to show (0: none).")
    ] = SHOWN_LOGS,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """Show one job: status, payload, result, every run with its error (and traceback), logs."""
    settings = load_settings(data_dir=data_dir)
    url = open_database(settings).url
    detail = run_with_conn(url, lambda conn: _detail(conn, settings, project, job_id, logs))
    for line in render.job_detail(detail["job"], detail["runs"], detail["logs"], logs):
        out.print(line, highlight=False, soft_wrap=True, markup=False)


async def _detail(
    conn: Conn, settings: Settings, project: str | None, job_id: int, log_limit: int
) -> dict[str, Any]:
    pid = await project_id(conn, settings, project)
    job = await _job(conn, pid, job_id)
    runs: list[dict[str, Any]] = []
    after: int | None = None
    while True:
        page = await read_models.list_executions(conn, pid, JobId(job_id), after_seq=after)
        runs.extend(page.items)
        if page.next_key is None:
            break
        after = page.next_key
    lines: list[dict[str, Any]] = []
    if log_limit:
        page = await read_models.list_logs(conn, pid, JobId(job_id), limit=log_limit)
        lines = page.items
    return {"job": job, "runs": runs, "logs": lines}


def unknown_job(job_id: int) -> NotFound:
    """The error every `jobyard jobs` subcommand gives for an id that is not the project's."""
    return NotFound(
        f"job {job_id} does not exist in this project; `jobyard jobs` lists the newest",
        field="job_id",
    )


async def _job(conn: Conn, pid: Any, job_id: int) -> dict[str, Any]:
    try:
        return await read_models.get_job(conn, pid, JobId(job_id))
    except NotFound:
        raise unknown_job(job_id) from None


@jobs_app.command("cancel")
def jobs_cancel(job_id: JobIdArg, project: ProjectOpt = None, data_dir: DataDir = None) -> None:
    """Cancel a job: a pending one at once; a running one by asking its worker to stop."""
    settings = load_settings(data_dir=data_dir)
    url = open_database(settings).url
    row = run_with_conn(url, lambda conn: _cancel(conn, settings, project, job_id))
    if row["status"] == "cancelled":
        out.print(f"job {job_id} cancelled")
    else:
        out.print(
            f"job {job_id} is {row['status']}: its worker was asked to stop it "
            "(it ends as cancelled; `jobyard jobs show` follows it)"
        )


async def _cancel(
    conn: Conn, settings: Settings, project: str | None, job_id: int
) -> dict[str, Any]:
    pid = await project_id(conn, settings, project)
    row = await transitions.cancel(conn, pid, JobId(job_id))
    if row is not None:
        return row
    job = await _job(conn, pid, job_id)  # NotFound when it does not exist
    raise Conflict(
        f"job {job_id} is already {job['status']}; only queued, scheduled, waiting or running "
        "jobs can be cancelled",
        field="job_id",
    )
