"""Organization members: list, change role, remove. People join through invitations
(api/resources/invitations.py), never by being added.

Admins manage members up to admin; only owners grant, change or remove the owner role. The last
owner can be neither demoted nor removed (409, enforced in one locked transaction).
"""

from __future__ import annotations

from fastapi import Response

from jobyard.api.deps import ConnDep, OrgAccess, OrgDep
from jobyard.api.pagination import Page, PageDep, make_page
from jobyard.api.resources._shared import IdPath
from jobyard.api.routes import Route, Scope
from jobyard.api.schemas import MemberPublic, MemberUpdate
from jobyard.core import tenancy
from jobyard.core.auth import PermissionDenied
from jobyard.domain.enums import Role


def owner_rule(org: OrgAccess, *roles: Role) -> None:
    if Role.OWNER in roles and org.role is not Role.OWNER:
        raise PermissionDenied("only an owner can grant, change or remove the owner role")


async def list_members(org: OrgDep, conn: ConnDep, page: PageDep) -> Page[MemberPublic]:
    rows = await tenancy.member_page(
        conn, org.org_id, after_id=page.after_id(), limit=page.limit + 1
    )
    built = make_page(rows, page.limit, key=lambda r: int(r["user_id"]))
    return Page[MemberPublic](
        items=[MemberPublic.model_validate(r) for r in built.items], next_cursor=built.next_cursor
    )


async def update_member(
    user_id: IdPath, body: MemberUpdate, org: OrgDep, conn: ConnDep
) -> MemberPublic:
    current = await tenancy.get_member(conn, org.org_id, user_id)
    owner_rule(org, body.role, Role(current["role"]))
    row = await tenancy.set_member_role(conn, org.org_id, user_id, body.role)
    return MemberPublic.model_validate(row)


async def remove_member(user_id: IdPath, org: OrgDep, conn: ConnDep) -> Response:
    current = await tenancy.get_member(conn, org.org_id, user_id)
    owner_rule(org, Role(current["role"]))
    await tenancy.remove_member(conn, org.org_id, user_id)
    return Response(status_code=204)


TAGS = ("members",)
ROUTES: tuple[Route, ...] = (
    Route("GET", "/orgs/{org_id}/members", Scope.ORG, list_members, min_role=Role.VIEWER,
          summary="List members", response_model=Page[MemberPublic], tags=TAGS),
    Route("PATCH", "/orgs/{org_id}/members/{user_id}", Scope.ORG, update_member,
          min_role=Role.ADMIN, summary="Change a member's role", response_model=MemberPublic,
          tags=TAGS, responses={409: "the last owner cannot be demoted"}),
    Route("DELETE", "/orgs/{org_id}/members/{user_id}", Scope.ORG, remove_member,
          min_role=Role.ADMIN, status_code=204, summary="Remove a member", tags=TAGS,
          operation_id="members_remove", responses={409: "the last owner cannot be removed"}),
)  # fmt: skip
