"""Organizations: list mine, create (the creator becomes owner), get, rename, delete."""

from __future__ import annotations

from fastapi import Response

from jobyard.api.deps import ConnDep, OrgDep, UserDep
from jobyard.api.pagination import Page, PageDep, make_page
from jobyard.api.routes import Route, Scope
from jobyard.api.schemas import OrgCreate, OrgPublic, OrgUpdate
from jobyard.core import tenancy
from jobyard.domain.enums import Role


async def list_orgs(user: UserDep, conn: ConnDep, page: PageDep) -> Page[OrgPublic]:
    """The organizations you belong to, with your role."""
    rows = await tenancy.org_page_for_user(
        conn, user.id, after_id=page.after_id(), limit=page.limit + 1
    )
    built = make_page(rows, page.limit, key=lambda r: int(r["id"]))
    return Page[OrgPublic](
        items=[OrgPublic.model_validate(r) for r in built.items], next_cursor=built.next_cursor
    )


async def create_org(body: OrgCreate, user: UserDep, conn: ConnDep) -> OrgPublic:
    """A new organization; you become its owner."""
    row = await tenancy.create_org(conn, user.id, name=body.name, slug=body.slug)
    return OrgPublic.model_validate(row)


async def get_org(org: OrgDep, conn: ConnDep) -> OrgPublic:
    row = await tenancy.get_org(conn, org.org_id)
    return OrgPublic.model_validate({**row, "role": org.role})


async def rename_org(body: OrgUpdate, org: OrgDep, conn: ConnDep) -> OrgPublic:
    row = await tenancy.rename_org(conn, org.org_id, body.name)
    return OrgPublic.model_validate({**row, "role": org.role})


async def delete_org(org: OrgDep, conn: ConnDep) -> Response:
    """Delete the organization with all its projects, queues, jobs and history."""
    await tenancy.delete_org(conn, org.org_id)
    return Response(status_code=204)


TAGS = ("orgs",)
ROUTES: tuple[Route, ...] = (
    Route("GET", "/orgs", Scope.USER, list_orgs, summary="List my organizations",
          response_model=Page[OrgPublic], tags=TAGS),
    Route("POST", "/orgs", Scope.USER, create_org, status_code=201,
          summary="Create an organization", response_model=OrgPublic, tags=TAGS,
          responses={409: "the slug is taken"}),
    Route("GET", "/orgs/{org_id}", Scope.ORG, get_org, min_role=Role.VIEWER,
          summary="Get an organization", response_model=OrgPublic, tags=TAGS),
    Route("PATCH", "/orgs/{org_id}", Scope.ORG, rename_org, min_role=Role.OWNER,
          summary="Rename an organization", response_model=OrgPublic, tags=TAGS,
          responses={409: "the slug is taken"}),
    Route("DELETE", "/orgs/{org_id}", Scope.ORG, delete_org, min_role=Role.OWNER,
          status_code=204, summary="Delete an organization", tags=TAGS),
)  # fmt: skip
