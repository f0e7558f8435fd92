"""claim.horizon_held: does a transaction of this database, older than the threshold, hold the
xmin horizon back? The worker claims past its position while it does (docs/DATABASE.md, "Claim
position"), because the dead ready rows of every job claimed since stay in the claim index until
their partition is rotated. Real sessions on a real server: an idle transaction that took an xid,
a REPEATABLE READ reader with a snapshot and no xid, and both in another database: there only
the xid counts.
"""

from __future__ import annotations

import asyncio
import re

from jobyard.core import claim
from jobyard.db.pool import Conn, connect


async def test_an_old_transaction_with_an_xid_holds_the_horizon(db_url: str, conn: Conn) -> None:
    assert not await claim.horizon_held(conn, held_s=0.2)
    holder = await connect(db_url)  # not autocommit: the transaction stays open
    try:
        await holder.execute("SELECT txid_current()")
        # Young: an ordinary transaction of the application, not a held horizon.
        assert not await claim.horizon_held(conn, held_s=30)
        await asyncio.sleep(0.3)
        assert await claim.horizon_held(conn, held_s=0.2)
        await holder.rollback()
        assert not await claim.horizon_held(conn, held_s=0.2)
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
        assert not await claim.horizon_held(conn, held_s=0.2)
        await elsewhere.execute("SELECT txid_current()")
        await asyncio.sleep(0.3)
        assert await claim.horizon_held(conn, held_s=0.2)
    finally:
        await elsewhere.rollback()
        await elsewhere.close()
    assert not await claim.horizon_held(conn, held_s=0.2)


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
    walked: dict[bool, int] = {}
    for held in (True, False):
        await conn.execute("TRUNCATE horizon_probe")
        await conn.execute("INSERT INTO horizon_probe SELECT generate_series(1, 20000)")
        elsewhere = await connect(pg_admin_url)
        try:
            if held:
                await elsewhere.execute("SELECT txid_current()")
            await conn.execute("DELETE FROM horizon_probe WHERE id < 20000")
            await buffers()  # the first walk, which marks what it may
            walked[held] = await buffers()
        finally:
            await elsewhere.rollback()
            await elsewhere.close()
    assert walked[True] > 2 * walked[False], walked
