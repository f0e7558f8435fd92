"""claim.horizon_held: does a transaction of this database, older than the threshold, hold the
xmin horizon back? The worker claims past its position while it does (docs/DATABASE.md, "Claim
position"), because the dead ready rows of every job claimed since stay in the claim index until
their partition is rotated. Real sessions on a real server: an idle transaction that took an xid,
a REPEATABLE READ reader with a snapshot and no xid, and the same in another database.
"""

from __future__ import annotations

import asyncio

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


async def test_a_transaction_in_another_database_does_not_count(
    pg_admin_url: str, db_url: str, conn: Conn
) -> None:
    # Since PostgreSQL 14 the horizon of a database's own tables ignores other databases'
    # snapshots, so a report elsewhere on the server must not change how the workers claim.
    elsewhere = await connect(pg_admin_url)
    try:
        await elsewhere.execute("SELECT txid_current()")
        await asyncio.sleep(0.3)
        assert not await claim.horizon_held(conn, held_s=0.2)
    finally:
        await elsewhere.rollback()
        await elsewhere.close()
