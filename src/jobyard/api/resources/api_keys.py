"""Project API keys: create (the secret is in that response only), list (never secrets), revoke.

Keys are managed by signed-in admins only: an API key cannot create or revoke keys, so a leaked
key cannot entrench itself.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import Response

from jobyard.api.deps import ConnDep, ProjectDep
from jobyard.api.pagination import Page, PageDep, make_page
from jobyard.api.resources._shared import IdPath
from jobyard.api.routes import Route, Scope
from jobyard.api.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyPublic
from jobyard.core import auth as core_auth
from jobyard.domain.enums import Role
from jobyard.logs import get_logger

log = get_logger("jobyard.api.keys")


async def list_keys(project: ProjectDep, conn: ConnDep, page: PageDep) -> Page[ApiKeyPublic]:
    rows = await core_auth.api_key_page(
        conn, project.project_id, after_id=page.after_id(), limit=page.limit + 1
    )
    built = make_page(rows, page.limit, key=lambda r: int(r["id"]))
    return Page[ApiKeyPublic](
        items=[ApiKeyPublic.model_validate(r) for r in built.items], next_cursor=built.next_cursor
    )


async def create_key(body: ApiKeyCreate, project: ProjectDep, conn: ConnDep) -> ApiKeyCreated:
    """A new key for this project with the given role. Its secret is returned only now."""
    expires = (
        datetime.now(UTC) + timedelta(days=body.expires_in_days) if body.expires_in_days else None
    )
    secret, row = await core_auth.create_api_key(
        conn,
        project.project_id,
        name=body.name,
        role=Role(body.role),
        created_by=project.user_id,
        expires_at=expires,
    )
    log.info("api key created", key_id=row["id"], project_id=project.project_id)
    return ApiKeyCreated.model_validate({**row, "key": secret})


async def revoke_key(key_id: IdPath, project: ProjectDep, conn: ConnDep) -> Response:
    """Revoke a key: it stops working on the next request."""
    await core_auth.revoke_api_key(conn, project.project_id, key_id)
    log.info("api key revoked", key_id=key_id, project_id=project.project_id)
    return Response(status_code=204)


TAGS = ("api keys",)
ROUTES: tuple[Route, ...] = (
    Route("GET", "/projects/{project_id}/api-keys", Scope.PROJECT, list_keys,
          min_role=Role.ADMIN, summary="List API keys", response_model=Page[ApiKeyPublic],
          tags=TAGS, api_keys=False),
    Route("POST", "/projects/{project_id}/api-keys", Scope.PROJECT, create_key,
          min_role=Role.ADMIN, status_code=201, summary="Create an API key",
          response_model=ApiKeyCreated, tags=TAGS, api_keys=False),
    Route("DELETE", "/projects/{project_id}/api-keys/{key_id}", Scope.PROJECT, revoke_key,
          min_role=Role.ADMIN, status_code=204, summary="Revoke an API key", tags=TAGS,
          api_keys=False, operation_id="api_keys_revoke"),
)  # fmt: skip
