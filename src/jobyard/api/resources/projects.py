"""Projects: list and create under an organization; get and delete by id."""

from __future__ import annotations

from fastapi import Response

from jobyard.api.deps import ConnDep, OrgDep, ProjectDep
from jobyard.api.pagination import Page, PageDep, make_page
from jobyard.api.routes import Route, Scope
from jobyard.api.schemas import ProjectCreate, ProjectPublic
from jobyard.core import tenancy
from jobyard.domain.enums import Role


async def list_projects(org: OrgDep, conn: ConnDep, page: PageDep) -> Page[ProjectPublic]:
    rows = await tenancy.project_page(
        conn, org.org_id, after_id=page.after_id(), limit=page.limit + 1
    )
    built = make_page(rows, page.limit, key=lambda r: int(r["id"]))
    return Page[ProjectPublic](
        items=[ProjectPublic.model_validate(r) for r in built.items],
        next_cursor=built.next_cursor,
    )


async def create_project(body: ProjectCreate, org: OrgDep, conn: ConnDep) -> ProjectPublic:
    row = await tenancy.create_project(conn, org.org_id, name=body.name, slug=body.slug)
    return ProjectPublic.model_validate(row)


async def get_project(project: ProjectDep, conn: ConnDep) -> ProjectPublic:
    return ProjectPublic.model_validate(await tenancy.get_project(conn, project.project_id))


async def delete_project(project: ProjectDep, conn: ConnDep) -> Response:
    """Delete the project with its queues, jobs, schedules, keys and history."""
    await tenancy.delete_project(conn, project.project_id)
    return Response(status_code=204)


TAGS = ("projects",)
ROUTES: tuple[Route, ...] = (
    Route("GET", "/orgs/{org_id}/projects", Scope.ORG, list_projects, min_role=Role.VIEWER,
          summary="List projects", response_model=Page[ProjectPublic], tags=TAGS),
    Route("POST", "/orgs/{org_id}/projects", Scope.ORG, create_project, min_role=Role.ADMIN,
          status_code=201, summary="Create a project", response_model=ProjectPublic, tags=TAGS,
          responses={409: "the slug is taken in this organization"}),
    Route("GET", "/projects/{project_id}", Scope.PROJECT, get_project, min_role=Role.VIEWER,
          summary="Get a project", response_model=ProjectPublic, tags=TAGS),
    Route("DELETE", "/projects/{project_id}", Scope.PROJECT, delete_project,
          min_role=Role.ADMIN, status_code=204, summary="Delete a project", tags=TAGS,
          api_keys=False),
)  # fmt: skip
