"""`jobyard dlq list`, `jobyard dlq replay ID`: dead letters of the project."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from jobyard.commands import render
from jobyard.commands.common import DataDir, ProjectOpt, out, typer_app
from jobyard.commands.scope import run_in_project
from jobyard.core import dlq, read_models
from jobyard.db.pool import Conn
from jobyard.domain.errors import NotFound
from jobyard.domain.ids import ProjectId

dlq_app = typer_app("Dead-lettered jobs: list, replay.")


@dlq_app.command("list")
def dlq_list(
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=200)] = 20,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """The newest dead letters: id (for replay), job, handler, reason, attempts, error."""

    async def work(conn: Conn, pid: ProjectId) -> list[dict[str, Any]]:
        page = await read_models.list_dead_letters(conn, pid, queue=queue, limit=limit)
        return page.items

    rows = run_in_project(project, data_dir, work)
    table = Table("id", "job", "queue", "handler", "reason", "attempts", "at", "error", "replayed")
    for row in rows:
        table.add_row(
            str(row["id"]),
            str(row["job_id"] or "-"),
            row["queue"],
            row["handler"],
            str(row["reason"]),
            str(row["attempts"]),
            render.when(row["dead_lettered_at"]),
            render.clip(row["error"] or "", 50),
            "-" if row["replay_job_id"] is None else f"as job {row['replay_job_id']}",
        )
    out.print(table)
    if not rows:
        out.print("no dead letters")


@dlq_app.command("replay")
def dlq_replay(
    dlq_id: Annotated[
        int, typer.Argument(min=1, help="The dead letter's id (`jobyard dlq list`).")
    ],
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """Enqueue a dead letter again as a new queued job (the old job's history stays)."""

    async def work(conn: Conn, pid: ProjectId) -> dict[str, Any]:
        try:
            return await dlq.replay(conn, pid, dlq_id)
        except NotFound:
            raise NotFound(
                f"dead letter {dlq_id} does not exist in this project; `jobyard dlq list` "
                "shows the ids",
                field="dlq_id",
            ) from None

    row = run_in_project(project, data_dir, work)
    out.print(f"dead letter {dlq_id} replayed as job {row['id']} ({row['status']})")
