"""The project and queues a day-to-day command works on, read through core (no SQL here)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from jobyard.commands.common import load_settings, open_database, run_with_conn
from jobyard.core import projects, read_models
from jobyard.db.pool import Conn
from jobyard.domain.errors import NotFound
from jobyard.domain.ids import ProjectId
from jobyard.domain.settings import Settings

T = TypeVar("T")


async def project_id(conn: Conn, settings: Settings, project: str | None) -> ProjectId:
    """The project of `--project` or JOBYARD_PROJECT; never created by a reading command."""
    ref = project or settings.project
    try:
        return await projects.resolve_project(conn, ref)
    except NotFound:
        raise NotFound(
            f"project {ref!r} does not exist in this database: pass --project org/project "
            "or set JOBYARD_PROJECT (a worker or an SDK defer creates it on first use)",
            field="project",
        ) from None


def run_in_project(
    project: str | None,
    data_dir: Path | None,
    body: Callable[[Conn, ProjectId], Awaitable[T]],
    settings: Settings | None = None,
) -> T:
    """Run `body` on one connection in the project of `--project` or JOBYARD_PROJECT
    (`settings`: when the caller has loaded them already)."""
    settings = settings or load_settings(data_dir=data_dir)
    url = open_database(settings).url

    async def work(conn: Conn) -> T:
        return await body(conn, await project_id(conn, settings, project))

    return run_with_conn(url, work)


async def all_queues(conn: Conn, project: ProjectId) -> list[dict[str, Any]]:
    """Every queue of the project, oldest first (a project has few; pages are followed)."""
    found: list[dict[str, Any]] = []
    after: int | None = None
    while True:
        page = await read_models.list_queues(conn, project, after_id=after, limit=200)
        found.extend(page.items)
        if page.next_key is None:
            return found
        after = page.next_key


async def queue_named(conn: Conn, project: ProjectId, name: str) -> dict[str, Any]:
    """One queue by name; NotFound lists the queues that exist."""
    queues = await all_queues(conn, project)
    for queue in queues:
        if queue["name"] == name:
            return queue
    raise NotFound(f"no queue named {name!r}; {known(queues)}", field="queue")


def known(queues: list[dict[str, Any]]) -> str:
    names = ", ".join(str(q["name"]) for q in queues)
    return f"known queues: {names}" if names else "the project has no queues yet"
