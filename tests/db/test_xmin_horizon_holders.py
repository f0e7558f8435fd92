"""Who holds this database's xmin horizon: one view (migration 0019), read by the claim's
degraded-mode rule, the health probe (/metrics, the dashboard) and the pressure benchmark's
timeline. Each case is a real holder on a real server, and each case asks all three readers,
so they cannot drift apart again: an xid here, a snapshot here, an xid in another database
(holds), a snapshot in another database (does not), and a prepared transaction.

Another test's transaction on the same server can hold the horizon too (an xid of any database
counts), so these tests run in the `horizon` xdist group and wait for "not held".
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobyard.core import claim, db_health
from jobyard.db import embedded, migrate, run
from jobyard.db.pool import Conn, connect
from tests.worker.helpers import eventually

pytestmark = pytest.mark.xdist_group("horizon")


async def _holders(conn: Conn) -> list[dict[str, Any]]:
    cur = await conn.execute("SELECT * FROM xmin_horizon_holders ORDER BY since")
    return list(await cur.fetchall())


async def _holder(conn: Conn, application_name: str) -> dict[str, Any] | None:
    """This test's holder; other tests' transactions on the server may be listed beside it."""
    found = [h for h in await _holders(conn) if h["application_name"] == application_name]
    assert len(found) <= 1, found
    return found[0] if found else None


async def _health(conn: Conn) -> db_health.DbHealth:
    return await db_health.read(conn, xmin_warn_s=0.2, dead_ratio_warn=0.5)


async def _nobody_holds(conn: Conn) -> None:
    async def free() -> bool:
        return not await _holders(conn)

    await eventually(free)


async def test_an_xid_here_is_seen_by_all_three_readers(db_url: str, conn: Conn) -> None:
    await _nobody_holds(conn)
    holder = await connect(db_url, application_name="forgotten-begin")
    try:
        await holder.execute("SELECT txid_current()")
        await asyncio.sleep(0.3)
        row = await _holder(conn, "forgotten-begin")
        assert row is not None and row["held_by"] == "xid"
        assert await claim.horizon_held(conn, held_s=0.2)
        health = await _health(conn)
        assert health.xmin_warning and health.xmin_age_s >= 0.3
        assert "a transaction (pid" in health.xmin_holder_text
        assert "forgotten-begin" in health.warnings[0]
        sample = await run.one(conn, "bench_timeline_sample")
        assert sample is not None and sample["oldest_xact_s"] >= 0.3
        assert sample["xmin_age"] >= row["xmin_age_xids"]  # xids go on being taken
    finally:
        await holder.rollback()
        await holder.close()
    await _nobody_holds(conn)


async def test_a_snapshot_here_holds_one_in_another_database_does_not(
    pg_admin_url: str, db_url: str, conn: Conn
) -> None:
    """The health probe used to name the other database's report: it holds nothing here."""
    await _nobody_holds(conn)
    elsewhere = await connect(pg_admin_url, application_name="report-elsewhere")
    here = await connect(db_url, application_name="report-here")
    try:
        for reader in (elsewhere, here):
            await reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            await reader.execute("SELECT count(*) FROM pg_class")  # a snapshot, no xid
        await asyncio.sleep(0.3)
        assert await _holder(conn, "report-elsewhere") is None
        row = await _holder(conn, "report-here")
        assert row is not None and row["held_by"] == "snapshot"
        assert await claim.horizon_held(conn, held_s=0.2)
        # Among the probe's holders, described as the dashboard and /metrics name them; not
        # necessarily the oldest: a test on the other xdist worker cloning a database (an xid in
        # `postgres`, no application name) can be older (seen in a run, 2026-12-05).
        listed = [db_health.describe_holder(h) for h in (await _health(conn)).xmin_holders]
        assert any("report-here" in text for text in listed), listed
        assert not any("report-elsewhere" in text for text in listed), listed

        await here.rollback()

        async def unheld_by_all_three() -> bool:  # the other database's snapshot is still open
            sample = await run.one(conn, "bench_timeline_sample")
            assert sample is not None
            return (
                not await _holders(conn)
                and not await claim.horizon_held(conn, held_s=0.2)
                and (await _health(conn)).xmin_holder is None
                and sample["oldest_xact_s"] is None
            )

        await eventually(unheld_by_all_three)
    finally:
        for reader in (elsewhere, here):
            await reader.rollback()
            await reader.close()


async def test_an_xid_in_another_database_holds_with_its_xid_age(
    pg_admin_url: str, conn: Conn
) -> None:
    await _nobody_holds(conn)
    elsewhere = await connect(pg_admin_url, application_name="writer-elsewhere")
    try:
        await elsewhere.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await elsewhere.execute("SELECT count(*) FROM pg_class")
        await elsewhere.execute("SELECT txid_current()")
        await asyncio.sleep(0.3)
        row = await _holder(conn, "writer-elsewhere")
        assert row is not None and row["held_by"] == "xid"
        assert row["database"] != (await _current_database(conn))
        assert await claim.horizon_held(conn, held_s=0.2)
        health = await _health(conn)
        assert f"database {row['database']}" in health.xmin_holder_text
    finally:
        await elsewhere.rollback()
        await elsewhere.close()
    # Gone on the server too before the next test of the group looks (CI once saw this
    # transaction still listed as the oldest holder in the snapshot test).
    await _nobody_holds(conn)


async def _current_database(conn: Conn) -> str:
    row = await (await conn.execute("SELECT current_database() AS db")).fetchone()
    assert row is not None
    return str(row["db"])


@pytest.fixture(scope="module")
def prepared_server() -> Iterator[str]:
    """A server of its own that allows prepared transactions (the shared test servers do not:
    max_prepared_transactions is 0 by default and needs a restart), migrated to head."""
    # Under /tmp with open permissions: as root the server runs as another system user.
    root = Path(tempfile.mkdtemp(prefix="jy-prepared-"))
    os.chmod(root, 0o755)
    pgdata = root / "pg"
    try:
        url = embedded.start(pgdata, fast_unsafe=True)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("ALTER SYSTEM SET max_prepared_transactions = 2")
        embedded.stop(pgdata)
        url = embedded.start(pgdata, fast_unsafe=True)
        migrate.upgrade(url)
        yield url
    finally:
        embedded.stop(pgdata)


@pytest.fixture
async def prepared_conn(prepared_server: str) -> AsyncIterator[Conn]:
    connection = await connect(prepared_server, autocommit=True)
    try:
        yield connection
    finally:
        await connection.close()


async def test_a_prepared_transaction_holds_after_its_session_is_gone(
    prepared_server: str, prepared_conn: Conn
) -> None:
    assert not await _holders(prepared_conn)
    session = await connect(prepared_server)
    await session.execute("SELECT txid_current()")
    await session.execute("PREPARE TRANSACTION 'nightly-export'")
    await session.close()  # no session is left: only the prepared transaction holds it
    try:
        await asyncio.sleep(0.3)
        [row] = await _holders(prepared_conn)
        assert (row["held_by"], row["pid"]) == ("prepared", None)
        assert row["application_name"] == "prepared transaction nightly-export"
        assert await claim.horizon_held(prepared_conn, held_s=0.2)
        health = await _health(prepared_conn)
        assert health.xmin_warning
        assert "a prepared transaction nightly-export in database" in health.warnings[0]
    finally:
        await prepared_conn.execute("ROLLBACK PREPARED 'nightly-export'")
    assert not await _holders(prepared_conn)
    assert not await claim.horizon_held(prepared_conn, held_s=0.2)


@pytest.fixture(scope="module")
def primary_and_standby() -> Iterator[tuple[str, Path]]:
    """A migrated server of its own and a hot standby of it that streams through the physical
    slot `jy_standby` with hot_standby_feedback, reporting every second: a real slot's xmin.
    Yields the primary's URL and the standby's data directory (the test stops the standby)."""
    root = Path(tempfile.mkdtemp(prefix="jy-standby-"))
    os.chmod(root, 0o755)
    primary, standby = root / "primary", root / "standby"
    try:
        url = embedded.start(primary, fast_unsafe=True)
        migrate.upgrade(url)
        embedded.start_standby(
            primary,
            standby,
            "jy_standby",
            {"hot_standby_feedback": "on", "wal_receiver_status_interval": "1s"},
        )
        yield url, standby
    finally:
        embedded.stop(standby)
        embedded.stop(primary)
        shutil.rmtree(root, ignore_errors=True)


async def test_a_slot_left_by_its_standby_holds_until_it_is_dropped(
    primary_and_standby: tuple[str, Path],
) -> None:
    """A standby's feedback through a slot is kept by the slot, not its walsender: the view
    before migration 0021 listed nobody, while vacuum waited for the slot's xmin."""
    url, standby = primary_and_standby
    conn = await connect(url, autocommit=True)
    try:

        async def slot_holds() -> bool:
            holder = await _holder(conn, "replication slot jy_standby")
            return holder is not None and holder["state"] == "active"

        await eventually(slot_holds)
        [active] = await _holders(conn)
        assert (active["held_by"], active["since"]) == ("slot", None)
        assert active["pid"] is not None  # the walsender streaming to the standby
        health = await _health(conn)
        assert health.holders_by_kind["slot"] == 1
        assert not health.xmin_warning  # a connected standby's feedback is normal
        assert not await claim.horizon_held(conn, held_s=0.2)  # nor does it slow the claims

        embedded.stop(standby)  # the standby is gone; its slot and the slot's xmin stay
        await asyncio.sleep(0.3)
        [left] = await _holders(conn)
        assert (left["held_by"], left["state"], left["pid"]) == ("slot", "inactive", None)
        assert left["since"] is not None  # PostgreSQL 17+: inactive_since
        assert await claim.horizon_held(conn, held_s=0.2)
        health = await _health(conn)
        assert health.xmin_warning
        assert health.xmin_holder_text == "replication slot jy_standby (inactive)"
        assert "SELECT pg_drop_replication_slot('jy_standby')" in health.warnings[0]
        sample = await run.one(conn, "bench_timeline_sample")
        assert sample is not None and sample["oldest_xact_s"] >= 0.3

        await conn.execute("SELECT pg_drop_replication_slot('jy_standby')")
        assert not await _holders(conn)
        assert not await claim.horizon_held(conn, held_s=0.2)
        assert not (await _health(conn)).warnings
    finally:
        await conn.close()


def test_a_slot_left_behind_warns_at_once_where_nobody_knows_since_when() -> None:
    """Before PostgreSQL 17 an inactive slot has no `since` (its age reads 0 s): it warns
    anyway, as it holds the horizon until somebody drops it. One row as the view gives it."""
    left = {
        "held_by": "slot", "state": "inactive", "pid": None, "database": None, "since": None,
        "application_name": "replication slot old_replica", "age_s": 0.0, "xmin_age_xids": 4242,
    }  # fmt: skip
    health = db_health.DbHealth([left], [], xmin_warn_s=300, dead_ratio_warn=0.5)
    assert health.xmin_warning
    assert health.warnings == [
        "replication slot old_replica (inactive) holds the xmin horizon 4,242 transactions "
        "back with no standby connected; if its standby is gone for good, drop the slot: "
        "SELECT pg_drop_replication_slot('old_replica')"
    ]
    active = left | {"state": "active", "pid": 77}
    assert not db_health.DbHealth([active], [], xmin_warn_s=300, dead_ratio_warn=0.5).warnings
