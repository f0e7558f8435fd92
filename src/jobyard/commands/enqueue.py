"""`jobyard enqueue HANDLER`: one job into an existing queue (or `--create-queue`)."""

from __future__ import annotations

from typing import Annotated

import typer

from jobyard.commands.common import (
    DataDir,
    ProjectOpt,
    clear_errors,
    load_settings,
    open_database,
    out,
    run_with_conn,
)
from jobyard.commands.scope import all_queues, known
from jobyard.core import projects
from jobyard.db.pool import Conn
from jobyard.domain.errors import NotFound
from jobyard.domain.settings import Settings
from jobyard.worker.commands import enqueue_job

root = typer.Typer()


@root.command("enqueue")
def enqueue_cmd(
    handler: Annotated[str, typer.Argument(help="Handler name: noop, sleep, fail, http_request…")],
    queue: Annotated[str, typer.Option("--queue", "-q", help="Queue name.")] = "default",
    payload: Annotated[str, typer.Option("--payload", "-p", help="JSON payload.")] = "{}",
    delay: Annotated[
        str | None, typer.Option("--delay", help="Run later: 5s, 500ms, 2m, 1h.")
    ] = None,
    priority: Annotated[
        int, typer.Option("--priority", min=-1000, max=1000, help="Higher runs first.")
    ] = 0,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Enqueue at most once per key.")
    ] = None,
    create_queue: Annotated[
        bool,
        typer.Option(
            "--create-queue",
            help="Create the queue (and the project) if missing, instead of refusing.",
        ),
    ] = False,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """Enqueue one job and print its id and status. An unknown queue is refused (a job there
    would wait forever for a worker nobody started) unless `--create-queue` is given."""
    settings = load_settings(data_dir=data_dir)
    url = open_database(settings).url
    run_with_conn(url, lambda conn: _check_queue(conn, settings, project, queue, create_queue))
    with clear_errors():
        job = enqueue_job(
            settings,
            url,
            handler=handler,
            queue=queue,
            payload=payload,
            delay=delay,
            priority=priority,
            idempotency_key=idempotency_key,
            project=project,
        )
    note = "" if job.created else " (already enqueued with this idempotency key)"
    out.print(f"job {job.id} {job.status}{note}", highlight=False)


async def _check_queue(
    conn: Conn, settings: Settings, project: str | None, queue: str, create: bool
) -> None:
    ref = project or settings.project
    try:
        pid = await projects.resolve_project(conn, ref, create=create)
    except NotFound:
        raise NotFound(
            f"project {ref!r} does not exist in this database (no worker or defer has used it); "
            "pass --create-queue to create it with the queue, or --project to pick another",
            field="project",
        ) from None
    queues = await all_queues(conn, pid)
    if any(q["name"] == queue for q in queues):
        return
    if create:
        return  # the SDK's defer creates a missing queue outside production
    raise NotFound(
        f"queue {queue!r} does not exist in project {ref!r}; {known(queues)} "
        f"(pass --create-queue to create {queue!r})",
        field="queue",
    )
