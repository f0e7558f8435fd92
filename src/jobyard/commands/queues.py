"""`jobyard queues list|pause NAME|resume NAME|limit NAME N|--none`."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from jobyard.commands.common import (
    DataDir,
    ProjectOpt,
    fail,
    load_settings,
    open_database,
    out,
    run_with_conn,
    typer_app,
)
from jobyard.commands.scope import all_queues, project_id, queue_named
from jobyard.core import admin
from jobyard.db.pool import Conn
from jobyard.domain.ids import QueueId
from jobyard.domain.settings import Settings

queues_app = typer_app("Queues of the project: list, pause, resume, limit.")
NameArg = Annotated[str, typer.Argument(help="Queue name (as `jobyard queues list` shows it).")]


@queues_app.command("list")
def queues_list(project: ProjectOpt = None, data_dir: DataDir = None) -> None:
    """List the project's queues: paused or not, concurrency limit, retry policy."""
    settings = load_settings(data_dir=data_dir)
    url = open_database(settings).url

    async def work(conn: Conn) -> list[dict[str, Any]]:
        return await all_queues(conn, await project_id(conn, settings, project))

    rows = run_with_conn(url, work)
    table = Table("name", "state", "max_concurrency", "retry policy")
    for row in rows:
        table.add_row(
            row["name"],
            "paused" if row["is_paused"] else "active",
            "-" if row["max_concurrency"] is None else str(row["max_concurrency"]),
            row.get("retry_policy_name") or "-",
        )
    out.print(table)


@queues_app.command("pause")
def queues_pause(name: NameArg, project: ProjectOpt = None, data_dir: DataDir = None) -> None:
    """Pause a queue: workers stop claiming from it (running jobs finish). Idempotent."""
    _set_paused(name, True, project, data_dir)


@queues_app.command("resume")
def queues_resume(name: NameArg, project: ProjectOpt = None, data_dir: DataDir = None) -> None:
    """Resume a paused queue: workers claim from it again. Idempotent."""
    _set_paused(name, False, project, data_dir)


@queues_app.command("limit")
def queues_limit(
    name: NameArg,
    max_concurrency: Annotated[
        int | None,
        typer.Argument(
            min=1, max=100_000, help="How many of its jobs may run at once, across all workers."
        ),
    ] = None,
    none: Annotated[bool, typer.Option("--none", help="Remove the queue's limit.")] = False,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """Set the queue's max_concurrency (or remove it with --none). Workers apply it from their
    next claim on."""
    if (max_concurrency is None) == (not none):
        raise fail(
            "give either a limit or --none",
            f"jobyard queues limit {name} 5, or jobyard queues limit {name} --none",
        )
    settings = load_settings(data_dir=data_dir)
    url = open_database(settings).url

    async def work(conn: Conn) -> None:
        pid = await project_id(conn, settings, project)
        queue = await queue_named(conn, pid, name)
        changes = {"max_concurrency": max_concurrency}
        await admin.update_queue(conn, pid, QueueId(queue["id"]), changes)

    run_with_conn(url, work)
    limit = "no limit" if max_concurrency is None else f"at most {max_concurrency} at once"
    out.print(f"queue {name}: {limit}", highlight=False)


def _set_paused(name: str, paused: bool, project: str | None, data_dir: Any) -> None:
    settings = load_settings(data_dir=data_dir)
    url = open_database(settings).url
    run_with_conn(url, lambda conn: _apply(conn, settings, project, name, paused))
    out.print(f"queue {name} {'paused' if paused else 'resumed'}", highlight=False)


async def _apply(
    conn: Conn, settings: Settings, project: str | None, name: str, paused: bool
) -> None:
    pid = await project_id(conn, settings, project)
    queue = await queue_named(conn, pid, name)
    await admin.set_queue_paused(conn, pid, QueueId(queue["id"]), paused)
