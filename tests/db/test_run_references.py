"""The references a run writes, jobs.worker_id and job_executions (job_id, worker_id), are kept by
statement triggers, not foreign keys (migration 0003: one check per claim or completion instead
of one per row). These prove the database itself still refuses a dangling reference, cascades
or nulls when the parent goes, and locks the parent like a key check does."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from jobyard.db.pool import Conn, connect
from tests.factories import make_job, make_queue, make_worker

MISSING = 987_654_321
RUN = (
    "INSERT INTO job_executions (job_id, execution_seq, attempt, worker_id, outcome, started_at,"
    " finished_at) VALUES "
)


def _run_row(seq: int) -> str:
    return f"(%(job)s, {seq}, 1, %(worker)s, 'succeeded', now(), now())"


async def _rows(conn: Conn, sql: str, params: Any = None) -> list[dict[str, Any]]:
    cur = await conn.execute(sql, params)
    return await cur.fetchall()


async def _setup(conn: Conn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    queue = await make_queue(conn)
    worker = await make_worker(conn, project_id=queue["project_id"])
    job = await make_job(conn, queue=queue)
    return queue, worker, job


async def test_an_execution_cannot_name_a_missing_job_or_worker(conn: Conn) -> None:
    _, worker, job = await _setup(conn)
    good = {"job": job["id"], "worker": worker["id"]}
    cases = {
        "job_executions_job_id_fkey": {**good, "job": MISSING},
        "job_executions_worker_id_fkey": {**good, "worker": MISSING},
    }
    for key, params in cases.items():
        # One bad row after a good one fails the whole statement, with the key's name.
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as caught:
            await conn.execute(
                RUN + f"(%(j0)s, 1, 1, %(w0)s, 'failed', now(), now()), {_run_row(2)}",
                {**params, "j0": job["id"], "w0": worker["id"]},
            )
        assert caught.value.diag.constraint_name == key
        assert str(MISSING) in (caught.value.diag.message_detail or "")
    assert await _rows(conn, "SELECT id FROM job_executions") == []
    # Good rows pass; a NULL worker is allowed (the worker was deleted since).
    await conn.execute(RUN + f"{_run_row(1)}, (%(job)s, 2, 1, NULL, 'failed', now(), now())", good)
    # An UPDATE that points a run at a missing job or worker is refused.
    for sql in (
        "UPDATE job_executions SET job_id = %s WHERE execution_seq = 1",
        "UPDATE job_executions SET worker_id = %s WHERE execution_seq = 2",
    ):
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            await conn.execute(sql, (MISSING,))
    await conn.execute("UPDATE job_executions SET worker_id = %s", (worker["id"],))


async def test_a_job_cannot_name_a_missing_worker(conn: Conn) -> None:
    queue, worker, job = await _setup(conn)
    other = await make_job(conn, queue=queue)
    # The statement path: one row, and rows of two workers with one missing.
    for sql, params in (
        ("UPDATE jobs SET worker_id = %s WHERE id = %s", (MISSING, job["id"])),
        (
            "UPDATE jobs SET worker_id = CASE WHEN id = %s THEN %s ELSE %s END WHERE id = ANY(%s)",
            (job["id"], worker["id"], MISSING, [job["id"], other["id"]]),
        ),
    ):
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as caught:
            await conn.execute(sql, params)
        assert caught.value.diag.constraint_name == "jobs_worker_id_fkey"
    # The insert path (a row trigger, since jobs are normally inserted without a worker).
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        await conn.execute(
            "INSERT INTO jobs (project_id, queue_id, handler, worker_id) VALUES (%s, %s, 'x', %s)",
            (queue["project_id"], queue["id"], MISSING),
        )
    await conn.execute("UPDATE jobs SET worker_id = %s", (worker["id"],))
    rows = await _rows(conn, "SELECT DISTINCT worker_id FROM jobs")
    assert rows == [{"worker_id": worker["id"]}]


async def test_deleting_a_job_deletes_its_runs_and_a_worker_nulls_its_references(
    conn: Conn,
) -> None:
    queue, worker, job = await _setup(conn)
    kept = await make_job(conn, queue=queue)
    await conn.execute("UPDATE jobs SET worker_id = %s", (worker["id"],))
    for j in (job, kept):
        await conn.execute(RUN + _run_row(1), {"job": j["id"], "worker": worker["id"]})
    await conn.execute("DELETE FROM jobs WHERE id = %s", (job["id"],))
    runs = await _rows(conn, "SELECT job_id, worker_id FROM job_executions")
    assert runs == [{"job_id": kept["id"], "worker_id": worker["id"]}]
    # A worker's deletion keeps the history and forgets the worker.
    await conn.execute("DELETE FROM workers WHERE id = %s", (worker["id"],))
    assert await _rows(conn, "SELECT job_id, worker_id FROM job_executions") == [
        {"job_id": kept["id"], "worker_id": None}
    ]
    assert await _rows(conn, "SELECT worker_id FROM jobs") == [{"worker_id": None}]
    # TRUNCATE reaches them as a key's would: workers CASCADE nulls, jobs CASCADE empties runs.
    second = await make_worker(conn, project_id=queue["project_id"], name="w2")
    await conn.execute("UPDATE jobs SET worker_id = %s", (second["id"],))
    await conn.execute("UPDATE job_executions SET worker_id = %s", (second["id"],))
    await conn.execute("TRUNCATE workers CASCADE")
    assert await _rows(conn, "SELECT worker_id FROM jobs") == [{"worker_id": None}]
    assert await _rows(conn, "SELECT worker_id FROM job_executions") == [{"worker_id": None}]
    await conn.execute("TRUNCATE jobs CASCADE")
    assert await _rows(conn, "SELECT id FROM job_executions") == []


async def test_a_job_or_worker_id_never_changes(conn: Conn) -> None:
    _, worker, job = await _setup(conn)
    for sql, row_id in (
        ("UPDATE jobs SET id = DEFAULT WHERE id = %s", job["id"]),
        ("UPDATE workers SET id = DEFAULT WHERE id = %s", worker["id"]),
    ):
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            await conn.execute(sql, (row_id,))
    await conn.execute("UPDATE workers SET name = 'renamed' WHERE id = %s", (worker["id"],))


@pytest.mark.parametrize(
    ("child_sql", "parent_delete"),
    [
        # A claim locks its worker; a completion's run row locks its job and its worker.
        ("UPDATE jobs SET worker_id = %(worker)s WHERE id = %(job)s", "workers"),
        (RUN + _run_row(1), "jobs"),
        (RUN + _run_row(1), "workers"),
    ],
    ids=["claim-locks-worker", "run-locks-job", "run-locks-worker"],
)
async def test_a_child_write_locks_its_parent_against_a_concurrent_delete(
    db_url: str, conn: Conn, child_sql: str, parent_delete: str
) -> None:
    _, worker, job = await _setup(conn)
    params = {"job": job["id"], "worker": worker["id"]}
    parent_id = params["job" if parent_delete == "jobs" else "worker"]
    writer = await connect(db_url)
    deleter = await connect(db_url, autocommit=True)
    try:
        await writer.execute(child_sql, params)
        # The uncommitted write holds FOR KEY SHARE on the parent row, as a key check would.
        await deleter.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            await deleter.execute(f"DELETE FROM {parent_delete} WHERE id = %s", (parent_id,))
        await writer.commit()
        # Once it commits, the delete sees the new reference and cascades or nulls it.
        await deleter.execute(f"DELETE FROM {parent_delete} WHERE id = %s", (parent_id,))
    finally:
        await writer.close()
        await deleter.close()
    if parent_delete == "jobs":
        assert await _rows(conn, "SELECT id FROM job_executions") == []
    else:
        for table in ("jobs", "job_executions"):
            rows = await _rows(conn, f"SELECT worker_id FROM {table} WHERE worker_id IS NOT NULL")
            assert rows == [], table


async def test_a_claim_of_a_worker_deleted_meanwhile_fails(db_url: str, conn: Conn) -> None:
    _, worker, job = await _setup(conn)
    deleter = await connect(db_url)
    try:
        await deleter.execute("DELETE FROM workers WHERE id = %s", (worker["id"],))
        claim = asyncio.create_task(
            conn.execute("UPDATE jobs SET worker_id = %s WHERE id = %s", (worker["id"], job["id"]))
        )
        await asyncio.sleep(0.3)
        assert not claim.done()
        await deleter.commit()
        with pytest.raises(psycopg.errors.ForeignKeyViolation) as caught:
            await claim
        assert caught.value.diag.constraint_name == "jobs_worker_id_fkey"
    finally:
        await deleter.close()


@pytest.mark.parametrize("parent", ["jobs", "workers"])
async def test_deleting_a_run_parent_outside_read_committed_is_refused(
    db_url: str, conn: Conn, parent: str
) -> None:
    _, worker, job = await _setup(conn)
    other = await connect(db_url)
    try:
        await other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(psycopg.errors.SerializationFailure):
            await other.execute(
                f"DELETE FROM {parent} WHERE id = %s",
                (job["id"] if parent == "jobs" else worker["id"],),
            )
        await other.rollback()
    finally:
        await other.close()
    assert len(await _rows(conn, f"SELECT id FROM {parent}")) == 1


async def test_deleting_a_worker_nulls_every_job_that_names_it(conn: Conn) -> None:
    """No index of jobs names worker_id (a claim sets it, migration 0030): the null-out finds
    the jobs the worker holds (job_held), the ones it ran (job_executions) and the ones written
    with it otherwise (job_worker_refs). Each way in, one job."""
    queue, worker, held = await _setup(conn)
    w = worker["id"]
    ran = await make_job(conn, queue=queue)
    await conn.execute(
        """UPDATE jobs SET status = 'running', worker_id = %s, execution_seq = 1, attempt = 1,
                          claimed_at = now(), started_at = now(),
                          lock_expires_at = now() + interval '1 minute'
           WHERE id = %s""",
        (w, held["id"]),
    )
    await conn.execute(
        "UPDATE jobs SET status = 'done', worker_id = %s, finished_at = now() WHERE id = %s",
        (w, ran["id"]),
    )
    await conn.execute(RUN + _run_row(1), {"job": ran["id"], "worker": w})
    await conn.execute(
        """INSERT INTO jobs (project_id, queue_id, handler, status, worker_id, finished_at)
           VALUES (%s, %s, 'noop', 'done', %s, now())""",
        (queue["project_id"], queue["id"], w),
    )
    rows = await _rows(conn, "SELECT id FROM jobs WHERE worker_id = %s", (w,))
    assert len(rows) == 3  # held, ran, and the one inserted with it

    await conn.execute("DELETE FROM workers WHERE id = %s", (w,))
    assert await _rows(conn, "SELECT id FROM jobs WHERE worker_id IS NOT NULL") == []
    assert await _rows(conn, "SELECT job_id FROM job_worker_refs") == []
