"""jobs.batch_id → job_batches is kept by triggers, not a foreign key (one check per statement
instead of one per row). These prove the database itself still refuses a dangling reference,
nulls it when the batch goes, and locks the batch like a key check does."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from jobyard.db.pool import Conn, connect
from tests.factories import make_job, make_queue

MISSING = 987_654_321


async def _batch(conn: Conn, queue: dict[str, Any], jobs: int) -> tuple[int, list[int]]:
    cur = await conn.execute(
        "INSERT INTO job_batches (project_id, queue_id, size) VALUES (%s, %s, %s) RETURNING id",
        (queue["project_id"], queue["id"], jobs),
    )
    row = await cur.fetchone()
    assert row is not None
    cur = await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, batch_id)
           SELECT %s, %s, 'noop', %s FROM generate_series(1, %s) RETURNING id""",
        (queue["project_id"], queue["id"], row["id"], jobs),
    )
    return row["id"], [r["id"] for r in await cur.fetchall()]


async def _batch_ids(conn: Conn, job_ids: list[int]) -> list[int | None]:
    cur = await conn.execute("SELECT batch_id FROM jobs WHERE id = ANY(%s) ORDER BY id", (job_ids,))
    return [r["batch_id"] for r in await cur.fetchall()]


async def test_a_job_cannot_name_a_missing_batch(conn: Conn) -> None:
    queue = await make_queue(conn)
    batch_id, _ = await _batch(conn, queue, 2)
    # One bad row among good ones fails the whole statement, with the key's name.
    with pytest.raises(psycopg.errors.ForeignKeyViolation) as caught:
        await conn.execute(
            """INSERT INTO jobs (project_id, queue_id, handler, batch_id)
               VALUES (%(p)s, %(q)s, 'noop', %(b)s), (%(p)s, %(q)s, 'noop', %(missing)s)""",
            {"p": queue["project_id"], "q": queue["id"], "b": batch_id, "missing": MISSING},
        )
    assert caught.value.diag.constraint_name == "jobs_batch_id_fkey"
    assert str(MISSING) in (caught.value.diag.message_detail or "")
    # An UPDATE that points a job at a missing batch is refused too; at a real one, allowed.
    job = await make_job(conn, queue=queue)
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        await conn.execute("UPDATE jobs SET batch_id = %s WHERE id = %s", (MISSING, job["id"]))
    await conn.execute("UPDATE jobs SET batch_id = %s WHERE id = %s", (batch_id, job["id"]))
    assert await _batch_ids(conn, [job["id"]]) == [batch_id]


async def test_deleting_or_truncating_batches_nulls_their_jobs_and_keeps_them(conn: Conn) -> None:
    queue = await make_queue(conn)
    first, first_jobs = await _batch(conn, queue, 3)
    second, second_jobs = await _batch(conn, queue, 2)
    await conn.execute("DELETE FROM job_batches WHERE id = %s", (first,))
    assert await _batch_ids(conn, first_jobs) == [None, None, None]
    assert await _batch_ids(conn, second_jobs) == [second, second]
    await conn.execute("TRUNCATE job_batches")
    assert await _batch_ids(conn, second_jobs) == [None, None]


async def test_a_batch_id_never_changes(conn: Conn) -> None:
    queue = await make_queue(conn)
    batch_id, _ = await _batch(conn, queue, 1)
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        await conn.execute("UPDATE job_batches SET id = DEFAULT WHERE id = %s", (batch_id,))
    await conn.execute("UPDATE job_batches SET size = 2 WHERE id = %s", (batch_id,))


async def test_deleting_a_queue_cascades_to_its_batches_and_jobs(conn: Conn) -> None:
    queue = await make_queue(conn)
    await _batch(conn, queue, 2)
    await conn.execute("DELETE FROM queues WHERE id = %s", (queue["id"],))
    for table in ("job_batches", "jobs"):
        cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")
        assert (await cur.fetchone()) == {"n": 0}, table


async def test_an_insert_locks_its_batch_against_a_concurrent_delete(
    db_url: str, conn: Conn
) -> None:
    queue = await make_queue(conn)
    batch_id, _ = await _batch(conn, queue, 1)
    inserter = await connect(db_url)
    deleter = await connect(db_url, autocommit=True)
    try:
        cur = await inserter.execute(
            """INSERT INTO jobs (project_id, queue_id, handler, batch_id)
               VALUES (%s, %s, 'noop', %s) RETURNING id""",
            (queue["project_id"], queue["id"], batch_id),
        )
        row = await cur.fetchone()
        assert row is not None
        # The uncommitted insert holds FOR KEY SHARE on the batch row, as a key check would.
        await deleter.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            await deleter.execute("DELETE FROM job_batches WHERE id = %s", (batch_id,))
        await inserter.commit()
        # Once it commits, the delete sees the new job and nulls it with the others.
        await deleter.execute("DELETE FROM job_batches WHERE id = %s", (batch_id,))
        assert await _batch_ids(conn, [row["id"]]) == [None]
    finally:
        await inserter.close()
        await deleter.close()


async def test_an_insert_naming_a_batch_deleted_meanwhile_fails(db_url: str, conn: Conn) -> None:
    queue = await make_queue(conn)
    batch_id, _ = await _batch(conn, queue, 1)
    deleter = await connect(db_url)
    try:
        await deleter.execute("DELETE FROM job_batches WHERE id = %s", (batch_id,))
        # The insert waits for the uncommitted delete (FOR KEY SHARE), then finds the batch gone.
        insert = asyncio.create_task(
            conn.execute(
                "INSERT INTO jobs (project_id, queue_id, handler, batch_id) VALUES (%s, %s, 'x', %s)",
                (queue["project_id"], queue["id"], batch_id),
            )
        )
        await asyncio.sleep(0.3)
        assert not insert.done()
        await deleter.commit()
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            await insert
    finally:
        await deleter.close()


async def test_deleting_batches_outside_read_committed_is_refused(db_url: str, conn: Conn) -> None:
    # Under REPEATABLE READ the null-out could miss a job committed after the snapshot; a key
    # would raise a serialization failure there, so the trigger refuses the same way.
    queue = await make_queue(conn)
    batch_id, jobs = await _batch(conn, queue, 1)
    other = await connect(db_url)
    try:
        await other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(psycopg.errors.SerializationFailure):
            await other.execute("DELETE FROM job_batches WHERE id = %s", (batch_id,))
        await other.rollback()
        # Deleting nothing is fine at any level (the trigger fires per statement).
        await other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        await other.execute("DELETE FROM job_batches WHERE id = %s", (MISSING,))
        await other.commit()
    finally:
        await other.close()
    assert await _batch_ids(conn, jobs) == [batch_id]
