"""Organizations, memberships and projects.

The last owner of an organization can be neither removed nor demoted: membership changes lock the
organization row first, so two concurrent demotions cannot each see "another owner remains".
"""

from __future__ import annotations

from typing import Any

from jobyard.db import run
from jobyard.db.errors import translated
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from jobyard.domain.errors import Conflict, NotFound
from jobyard.domain.ids import OrgId, ProjectId, UserId

Row = dict[str, Any]


async def org_page_for_user(conn: Conn, user_id: UserId, *, after_id: int, limit: int) -> list[Row]:
    return await run.all_rows(
        conn,
        "tenancy_org_page_for_user",
        {"user_id": user_id, "after_id": after_id, "limit": limit},
    )


async def create_org(conn: Conn, owner: UserId, *, name: str, slug: str) -> Row:
    """A new organization whose creator is its first owner."""
    async with conn.transaction():
        try:
            async with translated():
                org = await run.one(conn, "tenancy_org_insert", {"name": name, "slug": slug})
        except Conflict:
            raise Conflict(f"the slug {slug!r} is taken", field="slug") from None
        assert org is not None
        await run.one(
            conn,
            "tenancy_member_insert",
            {"org_id": org["id"], "user_id": owner, "role": Role.OWNER},
        )
    return {**org, "role": Role.OWNER}


async def get_org(conn: Conn, org_id: OrgId) -> Row:
    row = await run.one(conn, "tenancy_org_get", {"org_id": org_id})
    if row is None:
        raise NotFound("organization not found")
    return row


async def rename_org(conn: Conn, org_id: OrgId, name: str) -> Row:
    async with translated():
        row = await run.one(conn, "tenancy_org_rename", {"org_id": org_id, "name": name})
    if row is None:
        raise NotFound("organization not found")
    return row


async def delete_org(conn: Conn, org_id: OrgId) -> None:
    if await run.execute(conn, "tenancy_org_delete", {"org_id": org_id}) == 0:
        raise NotFound("organization not found")


# ----------------------------------------------------------------------------- members


async def member_page(conn: Conn, org_id: OrgId, *, after_id: int, limit: int) -> list[Row]:
    return await run.all_rows(
        conn, "tenancy_member_page", {"org_id": org_id, "after_id": after_id, "limit": limit}
    )


async def get_member(conn: Conn, org_id: OrgId, user_id: int) -> Row:
    row = await run.one(conn, "tenancy_member_get", {"org_id": org_id, "user_id": user_id})
    if row is None:
        raise NotFound("member not found")
    return row


async def _owner_would_vanish(
    conn: Conn, org_id: OrgId, member: Row, new_role: Role | None
) -> bool:
    if member["role"] != Role.OWNER or new_role is Role.OWNER:
        return False
    row = await run.one(conn, "tenancy_member_owner_count", {"org_id": org_id})
    assert row is not None
    return int(row["n"]) <= 1


async def set_member_role(conn: Conn, org_id: OrgId, user_id: int, role: Role) -> Row:
    async with conn.transaction():
        await run.one(conn, "tenancy_org_lock", {"org_id": org_id})
        member = await get_member(conn, org_id, user_id)
        if await _owner_would_vanish(conn, org_id, member, role):
            raise Conflict("the last owner cannot be demoted; make someone else owner first")
        await run.execute(
            conn, "tenancy_member_set_role", {"org_id": org_id, "user_id": user_id, "role": role}
        )
    return await get_member(conn, org_id, user_id)


async def remove_member(conn: Conn, org_id: OrgId, user_id: int) -> None:
    async with conn.transaction():
        await run.one(conn, "tenancy_org_lock", {"org_id": org_id})
        member = await get_member(conn, org_id, user_id)
        if await _owner_would_vanish(conn, org_id, member, None):
            raise Conflict("the last owner cannot be removed; make someone else owner first")
        await run.execute(conn, "tenancy_member_delete", {"org_id": org_id, "user_id": user_id})


# ----------------------------------------------------------------------------- projects


async def project_page(conn: Conn, org_id: OrgId, *, after_id: int, limit: int) -> list[Row]:
    return await run.all_rows(
        conn, "tenancy_project_page", {"org_id": org_id, "after_id": after_id, "limit": limit}
    )


async def create_project(conn: Conn, org_id: OrgId, *, name: str, slug: str) -> Row:
    try:
        async with translated():
            row = await run.one(
                conn, "tenancy_project_insert", {"org_id": org_id, "name": name, "slug": slug}
            )
    except Conflict:
        raise Conflict(
            "this organization already has a project with this slug", field="slug"
        ) from None
    assert row is not None
    return row


async def get_project(conn: Conn, project_id: ProjectId) -> Row:
    row = await run.one(conn, "tenancy_project_get", {"project_id": project_id})
    if row is None:
        raise NotFound("project not found")
    return row


async def delete_project(conn: Conn, project_id: ProjectId) -> None:
    if await run.execute(conn, "tenancy_project_delete", {"project_id": project_id}) == 0:
        raise NotFound("project not found")


async def add_first_owner(conn: Conn, org_id: OrgId, user_id: UserId, *, org_slug: str) -> None:
    """Make `user_id` the owner of an organization that has none (inside the caller's
    transaction); Conflict if it has one. The organization's lock, as every membership change
    takes it, keeps two first owners from both seeing none."""
    await run.one(conn, "tenancy_org_lock", {"org_id": org_id})
    owners = await run.one(conn, "tenancy_owner_count", {"org_id": org_id})
    if owners is not None and owners["owners"] > 0:
        raise Conflict(
            f"organization {org_slug!r} already has an owner: ask them for an invitation "
            f"(dashboard: Members; API: POST /api/v1/orgs/{org_id}/invitations)",
            field="org",
        )
    await run.one(
        conn, "tenancy_member_insert", {"org_id": org_id, "user_id": user_id, "role": Role.OWNER}
    )
