"""A job's parents, its queue (queue_id, project_id), its batch, its retry policy and its
schedule, are kept by triggers, not foreign keys (one check per statement instead of one per row).
These prove the database itself still refuses a dangling or cross-project reference, cascades or
nulls when the parent goes, and locks the parent like a key check does."""

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


async def _count(conn: Conn, table: str) -> int:
    cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")
    row = await cur.fetchone()
    assert row is not None
    n: int = row["n"]
    return n


async def test_deleting_a_queue_cascades_to_its_batches_jobs_and_their_runs(conn: Conn) -> None:
    queue = await make_queue(conn)
    kept = await make_queue(conn, project_id=queue["project_id"])
    _, jobs = await _batch(conn, queue, 2)
    await make_job(conn, queue=kept)
    await conn.execute(
        "INSERT INTO job_executions (job_id, execution_seq, attempt, outcome, started_at, finished_at)"
        " VALUES (%s, 1, 1, 'succeeded', now(), now())",
        (jobs[0],),
    )
    await conn.execute("DELETE FROM queues WHERE id = %s", (queue["id"],))
    for table in ("job_batches", "job_executions"):
        assert await _count(conn, table) == 0, table
    cur = await conn.execute("SELECT queue_id FROM jobs")
    assert await cur.fetchall() == [{"queue_id": kept["id"]}]
    # Through the project, as a key's cascade did; and TRUNCATE ... CASCADE reaches jobs too.
    await conn.execute("DELETE FROM projects WHERE id = %s", (kept["project_id"],))
    assert await _count(conn, "jobs") == 0
    await make_job(conn, queue=await make_queue(conn))
    await conn.execute("TRUNCATE queues CASCADE")
    assert await _count(conn, "jobs") == 0


async def test_a_job_cannot_name_a_missing_queue_or_another_projects_queue(conn: Conn) -> None:
    queue = await make_queue(conn)
    other = await make_queue(conn)
    insert = "INSERT INTO jobs (project_id, queue_id, handler) VALUES "
    bad_rows = {
        # One row, one queue: the trigger's one-lookup path.
        "missing queue": (f"{insert}(%(p)s, %(missing)s, 'x')", MISSING),
        "queue of another project": (f"{insert}(%(p)s, %(other)s, 'x')", other["id"]),
        # Several queues in one statement: the general path, with one bad pair among good ones.
        "mixed": (
            f"{insert}(%(p)s, %(q)s, 'x'), (%(op)s, %(other)s, 'x'), (%(op)s, %(q)s, 'x')",
            queue["id"],
        ),
    }
    params = {
        "p": queue["project_id"],
        "q": queue["id"],
        "op": other["project_id"],
        "other": other["id"],
        "missing": MISSING,
    }
    for label, (sql, bad_queue) in bad_rows.items():
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as caught:
            await conn.execute(sql, params)
        assert caught.value.diag.constraint_name == "jobs_queue_fkey", label
        assert f"=({bad_queue}, " in (caught.value.diag.message_detail or ""), label
    assert await _count(conn, "jobs") == 0
    # Good rows of two queues in one statement pass, each queue checked once.
    await conn.execute(
        f"{insert}(%(p)s, %(q)s, 'x'), (%(op)s, %(other)s, 'x'), (%(p)s, %(q)s, 'x')", params
    )
    # Moving a job to a missing queue or to a queue of another project is refused; within its
    # project, allowed; and a queue's id or project never changes under its jobs.
    job = await make_job(conn, queue=queue)
    moved = await make_queue(conn, project_id=queue["project_id"])
    for sql in (
        "UPDATE jobs SET queue_id = %(missing)s WHERE id = %(j)s",
        "UPDATE jobs SET queue_id = %(other)s WHERE id = %(j)s",
        "UPDATE jobs SET project_id = %(op)s WHERE id = %(j)s",
        "UPDATE queues SET project_id = %(op)s WHERE id = %(q)s",
    ):
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            await conn.execute(sql, {**params, "j": job["id"]})
    await conn.execute("UPDATE jobs SET queue_id = %s WHERE id = %s", (moved["id"], job["id"]))
    await conn.execute("UPDATE queues SET priority = 3 WHERE id = %s", (queue["id"],))


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


async def test_an_insert_locks_its_queue_against_a_concurrent_delete(
    db_url: str, conn: Conn
) -> None:
    queue = await make_queue(conn)
    inserter = await connect(db_url)
    deleter = await connect(db_url, autocommit=True)
    try:
        await inserter.execute(
            "INSERT INTO jobs (project_id, queue_id, handler) VALUES (%s, %s, 'noop')",
            (queue["project_id"], queue["id"]),
        )
        # The uncommitted insert holds FOR KEY SHARE on the queue row, as the key did.
        await deleter.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            await deleter.execute("DELETE FROM queues WHERE id = %s", (queue["id"],))
        await inserter.commit()
        # Once it commits, the delete sees the new job and takes it with the queue.
        await deleter.execute("DELETE FROM queues WHERE id = %s", (queue["id"],))
        assert await _count(conn, "jobs") == 0
    finally:
        await inserter.close()
        await deleter.close()


async def test_an_insert_into_a_queue_deleted_meanwhile_fails(db_url: str, conn: Conn) -> None:
    queue = await make_queue(conn)
    deleter = await connect(db_url)
    try:
        await deleter.execute("DELETE FROM queues WHERE id = %s", (queue["id"],))
        insert = asyncio.create_task(
            conn.execute(
                "INSERT INTO jobs (project_id, queue_id, handler) VALUES (%s, %s, 'x')",
                (queue["project_id"], queue["id"]),
            )
        )
        await asyncio.sleep(0.3)
        assert not insert.done()
        await deleter.commit()
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as caught:
            await insert
        assert caught.value.diag.constraint_name == "jobs_queue_fkey"
    finally:
        await deleter.close()
    assert await _count(conn, "jobs") == 0


async def _insert_job(conn: Conn, queue: dict[str, Any]) -> None:
    await conn.execute(
        "INSERT INTO jobs (project_id, queue_id, handler) VALUES (%s, %s, 'noop')",
        (queue["project_id"], queue["id"]),
    )


async def _delete_times_out(deleter: Conn, queue: dict[str, Any]) -> bool:
    await deleter.execute("SET lock_timeout = '300ms'")
    try:
        await deleter.execute("DELETE FROM queues WHERE id = %s", (queue["id"],))
    except psycopg.errors.LockNotAvailable:
        return True
    return False


async def test_concurrent_inserts_hold_their_queue_without_writing_its_row(
    db_url: str, conn: Conn
) -> None:
    # Migration 0034: a row lock by two transactions at once is a MultiXact, one per enqueue
    # when producers share a queue; the shared advisory lock writes nothing into the row.
    queue = await make_queue(conn)
    inserters = [await connect(db_url), await connect(db_url)]
    deleter = await connect(db_url, autocommit=True)
    try:
        for inserter in inserters:
            await _insert_job(inserter, queue)
        cur = await conn.execute(
            "SELECT xmax::text AS xmax FROM queues WHERE id = %s", (queue["id"],)
        )
        row = await cur.fetchone()
        assert row is not None and row["xmax"] == "0"
        # Both still keep the queue: a delete waits for each of them.
        assert await _delete_times_out(deleter, queue)
        await inserters[0].commit()
        assert await _delete_times_out(deleter, queue)
        await inserters[1].commit()
        await deleter.execute("DELETE FROM queues WHERE id = %s", (queue["id"],))
        assert await _count(conn, "jobs") == 0
    finally:
        for c in (*inserters, deleter):
            await c.close()


async def test_an_insert_into_several_queues_holds_each_of_them(db_url: str, conn: Conn) -> None:
    first = await make_queue(conn)
    second = await make_queue(conn, project_id=first["project_id"])
    inserter = await connect(db_url)
    deleter = await connect(db_url, autocommit=True)
    try:
        await inserter.execute(
            """INSERT INTO jobs (project_id, queue_id, handler)
               SELECT %s, q, 'noop' FROM unnest(%s::bigint[]) q""",
            (first["project_id"], [first["id"], second["id"]]),
        )
        assert await _delete_times_out(deleter, first)
        assert await _delete_times_out(deleter, second)
        await inserter.commit()
        await deleter.execute("DELETE FROM queues WHERE id = %s", (second["id"],))
        cur = await conn.execute("SELECT queue_id FROM jobs")
        assert [r["queue_id"] for r in await cur.fetchall()] == [first["id"]]
    finally:
        await inserter.close()
        await deleter.close()


async def test_a_repeatable_read_insert_into_a_queue_deleted_since_its_snapshot_fails(
    db_url: str, conn: Conn
) -> None:
    # Its snapshot still shows the queue, so it cannot rely on reading it after the advisory
    # lock: it locks the row instead, and the concurrent delete is a serialization failure.
    queue = await make_queue(conn)
    inserter = await connect(db_url)
    try:
        await inserter.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        await inserter.execute("SELECT 1")  # the snapshot
        await conn.execute("DELETE FROM queues WHERE id = %s", (queue["id"],))
        await conn.commit()
        with pytest.raises(psycopg.errors.SerializationFailure):
            await _insert_job(inserter, queue)
        await inserter.rollback()
    finally:
        await inserter.close()
    assert await _count(conn, "jobs") == 0


async def test_deleting_queues_outside_read_committed_is_refused(db_url: str, conn: Conn) -> None:
    queue = await make_queue(conn)
    await make_job(conn, queue=queue)
    other = await connect(db_url)
    try:
        await other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(psycopg.errors.SerializationFailure):
            await other.execute("DELETE FROM projects WHERE id = %s", (queue["project_id"],))
        await other.rollback()
    finally:
        await other.close()
    assert await _count(conn, "jobs") == 1


# jobs.retry_policy_id and jobs.schedule_id (migration 0028): the same rules, one test each for
# both references. A parent row is made for a queue's project (and the queue, for a schedule).
async def _policy(conn: Conn, queue: dict[str, Any]) -> int:
    cur = await conn.execute(
        "INSERT INTO retry_policies (project_id, name) VALUES (%s, gen_random_uuid()::text)"
        " RETURNING id",
        (queue["project_id"],),
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["id"])


async def _schedule(conn: Conn, queue: dict[str, Any]) -> int:
    cur = await conn.execute(
        "INSERT INTO scheduled_jobs (project_id, queue_id, name, cron, handler)"
        " VALUES (%s, %s, gen_random_uuid()::text, '* * * * *', 'tick') RETURNING id",
        (queue["project_id"], queue["id"]),
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["id"])


REFERENCES = {
    "retry_policy_id": ("retry_policies", "jobs_retry_policy_id_fkey", _policy),
    "schedule_id": ("scheduled_jobs", "jobs_schedule_id_fkey", _schedule),
}


async def _refs(conn: Conn, column: str, job_ids: list[int]) -> list[int | None]:
    cur = await conn.execute(
        f"SELECT {column} AS ref FROM jobs WHERE id = ANY(%s) ORDER BY id", (job_ids,)
    )
    return [r["ref"] for r in await cur.fetchall()]


async def _jobs_naming(
    conn: Conn, queue: dict[str, Any], column: str, ref: int, n: int
) -> list[int]:
    cur = await conn.execute(
        f"INSERT INTO jobs (project_id, queue_id, handler, {column})"
        " SELECT %s, %s, 'noop', %s FROM generate_series(1, %s) RETURNING id",
        (queue["project_id"], queue["id"], ref, n),
    )
    return [r["id"] for r in await cur.fetchall()]


@pytest.mark.parametrize("column", list(REFERENCES))
async def test_a_job_cannot_name_a_missing_policy_or_schedule(conn: Conn, column: str) -> None:
    table, key, make = REFERENCES[column]
    queue = await make_queue(conn)
    parent = await make(conn, queue)
    insert = f"INSERT INTO jobs (project_id, queue_id, handler, {column}) VALUES "
    params = {"p": queue["project_id"], "q": queue["id"], "ok": parent, "missing": MISSING}
    # Alone, and as one bad row among good ones and rows naming none: the statement fails whole.
    for values in (
        "(%(p)s, %(q)s, 'x', %(missing)s)",
        "(%(p)s, %(q)s, 'x', %(ok)s), (%(p)s, %(q)s, 'x', NULL), (%(p)s, %(q)s, 'x', %(missing)s)",
    ):
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as caught:
            await conn.execute(insert + values, params)
        assert caught.value.diag.constraint_name == key
        assert f"({column})=({MISSING})" in (caught.value.diag.message_detail or "")
        assert f'"{table}"' in (caught.value.diag.message_detail or "")
    assert await _count(conn, "jobs") == 0
    [job] = await _jobs_naming(conn, queue, column, parent, 1)
    # An UPDATE to a missing parent is refused; to a real one or to NULL, allowed.
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        await conn.execute(f"UPDATE jobs SET {column} = %s WHERE id = %s", (MISSING, job))
    await conn.execute(f"UPDATE jobs SET {column} = NULL WHERE id = %s", (job,))
    await conn.execute(f"UPDATE jobs SET {column} = %s WHERE id = %s", (parent, job))
    assert await _refs(conn, column, [job]) == [parent]
    # A parent's id never changes under its jobs.
    with pytest.raises(psycopg.errors.ForeignKeyViolation) as caught:
        await conn.execute(f"UPDATE {table} SET id = DEFAULT WHERE id = %s", (parent,))
    assert caught.value.diag.constraint_name == key


@pytest.mark.parametrize("column", list(REFERENCES))
async def test_deleting_a_policy_or_schedule_nulls_its_jobs_and_keeps_them(
    conn: Conn, column: str
) -> None:
    table, _, make = REFERENCES[column]
    queue = await make_queue(conn)
    gone, kept = await make(conn, queue), await make(conn, queue)
    gone_jobs = await _jobs_naming(conn, queue, column, gone, 3)
    kept_jobs = await _jobs_naming(conn, queue, column, kept, 2)
    await conn.execute(f"DELETE FROM {table} WHERE id = %s", (gone,))
    assert await _refs(conn, column, gone_jobs) == [None, None, None]
    assert await _refs(conn, column, kept_jobs) == [kept, kept]
    assert await _count(conn, "jobs") == 5
    if table == "scheduled_jobs":
        # No key refers to scheduled_jobs now, so TRUNCATE needs no CASCADE; it nulls the rest.
        await conn.execute("TRUNCATE scheduled_jobs")
        assert await _refs(conn, column, kept_jobs) == [None, None]
        assert await _count(conn, "jobs") == 5


@pytest.mark.parametrize("column", list(REFERENCES))
async def test_an_insert_locks_its_policy_or_schedule_against_a_concurrent_delete(
    db_url: str, conn: Conn, column: str
) -> None:
    table, _, make = REFERENCES[column]
    queue = await make_queue(conn)
    parent = await make(conn, queue)
    inserter = await connect(db_url)
    deleter = await connect(db_url, autocommit=True)
    try:
        [job] = await _jobs_naming(inserter, queue, column, parent, 1)
        # The uncommitted insert holds FOR KEY SHARE on the parent row, as the key did.
        await deleter.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            await deleter.execute(f"DELETE FROM {table} WHERE id = %s", (parent,))
        await inserter.commit()
        # Once it commits, the delete sees the new job and nulls its reference.
        await deleter.execute(f"DELETE FROM {table} WHERE id = %s", (parent,))
        assert await _refs(conn, column, [job]) == [None]
    finally:
        await inserter.close()
        await deleter.close()


@pytest.mark.parametrize("column", list(REFERENCES))
async def test_an_insert_naming_a_policy_or_schedule_deleted_meanwhile_fails(
    db_url: str, conn: Conn, column: str
) -> None:
    table, key, make = REFERENCES[column]
    queue = await make_queue(conn)
    parent = await make(conn, queue)
    deleter = await connect(db_url)
    try:
        await deleter.execute(f"DELETE FROM {table} WHERE id = %s", (parent,))
        insert = asyncio.create_task(_jobs_naming(conn, queue, column, parent, 1))
        await asyncio.sleep(0.3)
        assert not insert.done()
        await deleter.commit()
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as caught:
            await insert
        assert caught.value.diag.constraint_name == key
    finally:
        await deleter.close()
    assert await _count(conn, "jobs") == 0


@pytest.mark.parametrize("column", list(REFERENCES))
async def test_deleting_a_policy_or_schedule_outside_read_committed_is_refused(
    db_url: str, conn: Conn, column: str
) -> None:
    table, _, make = REFERENCES[column]
    queue = await make_queue(conn)
    parent = await make(conn, queue)
    jobs = await _jobs_naming(conn, queue, column, parent, 1)
    other = await connect(db_url)
    try:
        await other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(psycopg.errors.SerializationFailure):
            await other.execute(f"DELETE FROM {table} WHERE id = %s", (parent,))
        await other.rollback()
    finally:
        await other.close()
    assert await _refs(conn, column, jobs) == [parent]
