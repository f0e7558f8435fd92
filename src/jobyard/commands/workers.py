"""`jobyard workers list|show ID|pause ID|resume ID`: the project's workers, one with its
health, and an operator's pause (the worker claims nothing until resumed)."""

from __future__ import annotations

import getpass
import socket
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from jobyard.commands import render
from jobyard.commands.common import DataDir, ProjectOpt, out, typer_app
from jobyard.commands.scope import run_in_project
from jobyard.core import read_models, workers
from jobyard.db.pool import Conn
from jobyard.domain.enums import WorkerStatus
from jobyard.domain.errors import NotFound
from jobyard.domain.ids import ProjectId, WorkerId

workers_app = typer_app(
    "Workers of the project: list them, show one with its health (a blocked event loop, "
    "handler threads that outlived their runs), pause or resume one."
)
LIVE = [WorkerStatus.ACTIVE, WorkerStatus.DRAINING]
WorkerIdArg = Annotated[
    int, typer.Argument(min=1, help="Worker id (as `jobyard workers list` shows it).")
]


@workers_app.command("list")
def workers_list(
    all_: Annotated[
        bool, typer.Option("--all", help="Also stopped and dead workers (newest first).")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500, help="Rows to show.")] = 50,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """List live workers (active or draining): heartbeat, jobs in flight, health, queues."""

    async def work(conn: Conn, pid: ProjectId) -> list[dict[str, Any]]:
        page = await read_models.list_workers(
            conn, pid, statuses=None if all_ else LIVE, limit=limit
        )
        return page.items

    rows = run_in_project(project, data_dir, work)
    # No host:pid column: a worker's default name is host:pid (`workers show` has both).
    table = Table("id", "name", "status", "heartbeat", "in flight", "health", "queues")
    for w in rows:
        table.add_row(
            str(w["id"]),
            w["name"],
            w["status"],
            render.when(w["last_heartbeat_at"]),
            f"{w['in_flight']}/{w['capacity']}",
            render.worker_health_summary(w),
            ", ".join(w["queues"]),
        )
    out.print(table)
    if not rows:
        out.print("no live workers" if not all_ else "no workers have registered")


@workers_app.command("show")
def workers_show(
    worker_id: WorkerIdArg, project: ProjectOpt = None, data_dir: DataDir = None
) -> None:
    """Show one worker: identity, capacity, health, recent heartbeats."""

    async def work(conn: Conn, pid: ProjectId) -> dict[str, Any]:
        try:
            return await read_models.get_worker(conn, pid, WorkerId(worker_id), heartbeats=5)
        except NotFound:
            raise _unknown(worker_id) from None

    worker = run_in_project(project, data_dir, work)
    for line in render.worker_detail(worker):
        out.print(line, highlight=False, markup=False)


@workers_app.command("pause")
def workers_pause(
    worker_id: WorkerIdArg, project: ProjectOpt = None, data_dir: DataDir = None
) -> None:
    """Pause a worker: from its next heartbeat it claims nothing until resumed; the jobs it runs
    go on (take a machine out of rotation without a shell on it)."""
    row = _set_paused(worker_id, True, project, data_dir)
    out.print(f"worker {worker_id} {row['name']!r} paused: it claims nothing from its next "
              "heartbeat on", highlight=False)  # fmt: skip


@workers_app.command("resume")
def workers_resume(
    worker_id: WorkerIdArg, project: ProjectOpt = None, data_dir: DataDir = None
) -> None:
    """Resume a paused worker: it claims again from its next heartbeat."""
    row = _set_paused(worker_id, False, project, data_dir)
    out.print(f"worker {worker_id} {row['name']!r} resumed", highlight=False)


def _set_paused(
    worker_id: int, paused: bool, project: str | None, data_dir: Path | None
) -> dict[str, Any]:
    async def work(conn: Conn, pid: ProjectId) -> dict[str, Any]:
        try:
            return await workers.set_paused(conn, pid, WorkerId(worker_id), paused, by=_me())
        except NotFound:
            raise _unknown(worker_id) from None

    return run_in_project(project, data_dir, work)


def _me() -> str:
    """Who pauses from a terminal: the login and host, as a shell prompt would say."""
    try:
        login = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        login = "unknown"
    return f"{login}@{socket.gethostname()} (cli)"


def _unknown(worker_id: int) -> NotFound:
    return NotFound(
        f"worker {worker_id} does not exist in this project; `jobyard workers list --all` shows "
        "the ids",
        field="worker_id",
    )
