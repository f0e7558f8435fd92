"""Resolve the project a worker or SDK app works in, and make sure its queues exist."""

from __future__ import annotations

import re

from jobyard.db import run
from jobyard.db.pool import Conn
from jobyard.domain import limits
from jobyard.domain.errors import NotFound, ValidationFailed
from jobyard.domain.ids import ProjectId

_SHOWN_CHARS = 40


def check_slug(what: str, slug: str, *, field: str = "slug") -> None:
    """An organization's or project's slug (`what`), by the rule of the database's CHECK; else
    a ValidationFailed naming the rule (before anything is written)."""
    if re.fullmatch(limits.SLUG_PATTERN, slug) is None:
        raise ValidationFailed(
            f"the {what} slug {_shown(slug)} is invalid: use {limits.SLUG_RULE}", field=field
        )


def check_queue_name(name: str) -> None:
    """A queue name, by the rule of the database's CHECK (and the API's QueueName)."""
    if re.fullmatch(limits.QUEUE_NAME_PATTERN, name) is None:
        raise ValidationFailed(
            f"queue name {_shown(name)} is invalid: use {limits.QUEUE_NAME_RULE}", field="queue"
        )


def _shown(value: str) -> str:
    """The value quoted for a one-line message: a long one is cut."""
    if len(value) <= _SHOWN_CHARS:
        return repr(value)
    return f"{value[:_SHOWN_CHARS]!r}… ({len(value)} characters)"


async def resolve_project(conn: Conn, ref: str, *, create: bool = False) -> ProjectId:
    """`ref` is a numeric id or "org-slug/project-slug". With create=True a missing slug pair is
    created (local development) after both slugs pass the database's rule; otherwise NotFound
    names what is missing."""
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
    # Both before any insert: a bad project slug must not leave its organization behind.
    try:
        check_slug("organization", org_slug)
        check_slug("project", project_slug)
    except ValidationFailed as exc:
        raise ValidationFailed(
            f"project {_shown(ref)}: {exc.message} (e.g. 'acme/shop')", field="project"
        ) from None
    org_id = await ensure_org(conn, org_slug)
    project = await run.one(conn, "project_ensure", {"org_id": org_id, "slug": project_slug})
    assert project is not None
    return ProjectId(project["id"])


async def ensure_org(conn: Conn, slug: str) -> int:
    """The organization with this (already checked) slug, created if missing; its id."""
    org = await run.one(conn, "project_ensure_org", {"slug": slug})
    assert org is not None
    return int(org["id"])


async def ensure_queues(conn: Conn, project_id: ProjectId, names: list[str]) -> None:
    """Create the queues that are missing; every name is checked before any is created."""
    for name in names:
        check_queue_name(name)
    for name in names:
        await run.one(conn, "queue_ensure", {"project_id": project_id, "name": name})
