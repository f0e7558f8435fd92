"""claim.horizon_held: does a transaction of this database, older than the threshold, hold the
xmin horizon back? The worker claims past its position while it does (docs/DATABASE.md, "Claim
position"), because the dead ready rows of every job claimed since stay in the claim index until
their partition is rotated. Real sessions on a real server: an idle transaction that took an xid,
a REPEATABLE READ reader with a snapshot and no xid, and both in another database: there only
the xid counts.

Since an xid of any database counts, another test's transaction on the same server (the suite
runs two processes) can hold the horizon too. So every "not held" here is waited for, not
taken at one instant, and these tests run in one xdist group with the other long holders of
this server's horizon that would otherwise outlast the waits.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from jobyard.core import claim
from jobyard.db.pool import Conn, connect
from tests.worker.helpers import eventually

pytestmark = pytest.mark.xdist_group("horizon")


async def _not_held(conn: Conn) -> None:
    async def free() -> bool:
        return not await claim.horizon_held(conn, held_s=0.2)

    await eventually(free)


async def test_an_old_transaction_with_an_xid_holds_the_horizon(db_url: str, conn: Conn) -> None:
    await _not_held(conn)
    holder = await connect(db_url)  # not autocommit: the transaction stays open
    try:
        await holder.execute("SELECT txid_current()")
        # Young: an ordinary transaction of the application, not a held horizon.
        assert not await claim.horizon_held(conn, held_s=30)
        await asyncio.sleep(0.3)
        assert await claim.horizon_held(conn, held_s=0.2)
        await holder.rollback()
        await _not_held(conn)
    finally:
        await holder.close()


async def test_a_repeatable_read_snapshot_without_an_xid_holds_it_too(
    db_url: str, conn: Conn
) -> None:
    reader = await connect(db_url)
    try:
        await reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await reader.execute("SELECT count(*) FROM jobs")  # a snapshot: backend_xmin, no xid
        await asyncio.sleep(0.3)
        assert await claim.horizon_held(conn, held_s=0.2)
    finally:
        await reader.rollback()
        await reader.close()


async def test_an_xid_held_in_another_database_counts_a_snapshot_there_does_not(
    pg_admin_url: str, db_url: str, conn: Conn
) -> None:
    # Since PostgreSQL 14 the horizon of a database's own tables ignores other databases'
    # snapshots, so a report elsewhere on the server does not change how the workers claim. An
    # xid is another matter: every snapshot on the server, this database's claims included,
    # keeps the rows that xid may not see yet, so dead ready rows stay in the claim index.
    elsewhere = await connect(pg_admin_url)
    try:
        await elsewhere.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await elsewhere.execute("SELECT count(*) FROM pg_class")  # a snapshot, no xid
        await asyncio.sleep(0.3)
        await _not_held(conn)  # with the snapshot still open
        await elsewhere.execute("SELECT txid_current()")
        await asyncio.sleep(0.3)
        assert await claim.horizon_held(conn, held_s=0.2)
    finally:
        await elsewhere.rollback()
        await elsewhere.close()
    await _not_held(conn)


async def test_an_xid_held_in_another_database_keeps_this_ones_dead_index_entries(
    pg_admin_url: str, conn: Conn
) -> None:
    """Why the rule above counts it: with an xid open elsewhere, a scan of this database cannot
    mark the dead entries it walks (kill_prior_tuple), and the next scan walks them again."""

    async def buffers() -> int:
        cur = await conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF)"
            " SELECT id FROM horizon_probe WHERE id > 0 ORDER BY id LIMIT 1"
        )
        plan = "\n".join(str(row["QUERY PLAN"]) for row in await cur.fetchall())
        found = re.search(r"shared hit=(\d+)", plan)
        assert found is not None, plan
        return int(found.group(1))

    await conn.execute(
        "CREATE TABLE horizon_probe (id int PRIMARY KEY) WITH (autovacuum_enabled = false)"
    )

    async def second_walk(elsewhere: Conn | None) -> int:
        await conn.execute("TRUNCATE horizon_probe")
        await conn.execute("INSERT INTO horizon_probe SELECT generate_series(1, 20000)")
        if elsewhere is not None:
            await elsewhere.execute("SELECT txid_current()")
        await conn.execute("DELETE FROM horizon_probe WHERE id < 20000")
        await buffers()  # the first walk, which marks what it may
        return await buffers()

    elsewhere = await connect(pg_admin_url)
    try:
        held = await second_walk(elsewhere)
    finally:
        await elsewhere.rollback()
        await elsewhere.close()

    # Without it the second walk is short, once no other test of the server holds an xid.
    async def short() -> int | None:
        walked = await second_walk(None)
        return walked if 2 * walked < held else None

    await eventually(short)
