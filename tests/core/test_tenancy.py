"""Membership rules in core, on real concurrent connections."""

from __future__ import annotations

import asyncio

from jobyard.core import tenancy
from jobyard.db.pool import Conn, connect
from jobyard.domain.enums import Role
from jobyard.domain.errors import Conflict
from jobyard.domain.ids import OrgId


async def _two_owners(conn: Conn) -> tuple[OrgId, list[int]]:
    cur = await conn.execute(
        "INSERT INTO organizations (name, slug) VALUES ('Race', 'race') RETURNING id"
    )
    org = await cur.fetchone()
    assert org is not None
    users = []
    for n in range(2):
        cur = await conn.execute(
            "INSERT INTO users (email, password_hash) VALUES (%s, 'x') RETURNING id",
            (f"owner{n}@example.test",),
        )
        row = await cur.fetchone()
        assert row is not None
        users.append(row["id"])
        await conn.execute(
            "INSERT INTO organization_members (org_id, user_id, role) VALUES (%s, %s, 'owner')",
            (org["id"], row["id"]),
        )
    return OrgId(org["id"]), users


async def test_concurrent_demotions_of_two_owners_leave_exactly_one(
    conn: Conn, db_url: str
) -> None:
    """Each demotion alone is legal (another owner remains); both at once would leave none.
    The organization row lock serialises them, so the second sees one owner and refuses."""
    for _ in range(5):
        await conn.execute("DELETE FROM organizations")
        await conn.execute("DELETE FROM users")
        org_id, (u1, u2) = await _two_owners(conn)
        c1 = await connect(db_url, autocommit=True)
        c2 = await connect(db_url, autocommit=True)
        try:
            results = await asyncio.gather(
                tenancy.set_member_role(c1, org_id, u1, Role.ADMIN),
                tenancy.set_member_role(c2, org_id, u2, Role.ADMIN),
                return_exceptions=True,
            )
        finally:
            await c1.close()
            await c2.close()
        assert sum(isinstance(r, Conflict) for r in results) == 1, results
        cur = await conn.execute(
            "SELECT count(*) AS n FROM organization_members WHERE role = 'owner'"
        )
        assert await cur.fetchone() == {"n": 1}


async def test_removing_and_demoting_the_last_owner_is_a_conflict(conn: Conn) -> None:
    org_id, (u1, u2) = await _two_owners(conn)
    await tenancy.remove_member(conn, org_id, u2)
    for attempt in (
        tenancy.remove_member(conn, org_id, u1),
        tenancy.set_member_role(conn, org_id, u1, Role.VIEWER),
    ):
        try:
            await attempt
        except Conflict:
            continue
        raise AssertionError("the last owner was removed or demoted")
    assert (await tenancy.set_member_role(conn, org_id, u1, Role.OWNER))["role"] == "owner"
