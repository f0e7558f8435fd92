"""Resolve the project a worker or SDK app works in, and make sure its queues exist."""

from __future__ import annotations

from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain.errors import NotFound, ValidationFailed
from jobyard.domain.ids import ProjectId


async def resolve_project(conn: Conn, ref: str, *, create: bool = False) -> ProjectId:
    """`ref` is a numeric id or "org-slug/project-slug". With create=True a missing slug pair is
    created (local development); otherwise NotFound names what is missing."""
    if ref.isdigit():
        row = await run.one(conn, "project_find_by_id", {"project_id": int(ref)})
        if row is None:
            raise NotFound(f"project {ref} does not exist", field="project")
        return ProjectId(row["id"])
    org_slug, sep, project_slug = ref.partition("/")
    if not sep or not org_slug or not project_slug:
        raise ValidationFailed(
            f"project must be an id or 'org/project', got {ref!r}", field="project"
        )
    row = await run.one(
        conn, "project_find_by_slugs", {"org_slug": org_slug, "project_slug": project_slug}
    )
    if row is not None:
        return ProjectId(row["id"])
    if not create:
        raise NotFound(f"project {ref!r} does not exist", field="project")
    org = await run.one(conn, "project_ensure_org", {"slug": org_slug})
    assert org is not None
    project = await run.one(conn, "project_ensure", {"org_id": org["id"], "slug": project_slug})
    assert project is not None
    return ProjectId(project["id"])


async def ensure_queues(conn: Conn, project_id: ProjectId, names: list[str]) -> None:
    for name in names:
        await run.one(conn, "queue_ensure", {"project_id": project_id, "name": name})
