"""The claim and the cron materializer pass over rows another transaction holds (SKIP LOCKED)
instead of waiting for them.

Each test holds a row lock from a second connection, then runs the real statement on a
connection whose `lock_timeout` is short: waiting for the held row would raise
LockNotAvailable, so the statement must answer with the other rows and never wait.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobyard.core import claim
from jobyard.core.schedules import materialize_due
from jobyard.db.pool import Conn, connect
from jobyard.domain.ids import QueueId, WorkerId
from jobyard.domain.models import QueueRef
from tests.core.test_schedules import new_schedule
from tests.factories import make_job, make_queue, make_worker

LOCK_TIMEOUT = "300ms"


async def _strict(db_url: str) -> Conn:
    """A connection that gives up on any row lock after LOCK_TIMEOUT."""
    strict = await connect(db_url, autocommit=True)
    await strict.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
    return strict


@pytest.mark.parametrize("max_concurrency", [None, 10])
async def test_a_claim_skips_a_job_another_transaction_holds_and_never_waits(
    db_url: str, conn: Conn, max_concurrency: int | None
) -> None:
    """Both claim paths: without a limit (no queue lock) and under the queue's lock."""
    queue = await make_queue(conn, max_concurrency=max_concurrency)
    worker = await make_worker(conn, project_id=queue["project_id"])
    ids = [(await make_job(conn, queue=queue))["id"] for _ in range(5)]
    ref = QueueRef(
        id=QueueId(queue["id"]),
        name=queue["name"],
        priority=0,
        is_paused=False,
        max_concurrency=max_concurrency,
    )
    holder = await connect(db_url)
    strict = await _strict(db_url)
    try:
        # The first claimable job (claim order: priority, run_at, id) is locked and stays so.
        await holder.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (ids[0],))
        got = await claim.claim_batch(strict, ref, WorkerId(worker["id"]), 10, lease_s=30)
        assert sorted(j.id for j in got) == ids[1:]
        await holder.rollback()
        # Released, it is the next claim's.
        again = await claim.claim_batch(strict, ref, WorkerId(worker["id"]), 10, lease_s=30)
        assert [j.id for j in again] == ids[:1]
    finally:
        await holder.close()
        await strict.close()


async def test_a_solo_claim_skips_a_suspect_another_transaction_holds(
    db_url: str, conn: Conn
) -> None:
    queue = await make_queue(conn)
    worker = await make_worker(conn, project_id=queue["project_id"])
    suspects = [(await make_job(conn, queue=queue))["id"] for _ in range(2)]
    await conn.execute("UPDATE jobs SET suspect = true WHERE id = ANY(%s)", (suspects,))
    ref = QueueRef(QueueId(queue["id"]), queue["name"], 0, False, None)
    holder = await connect(db_url)
    strict = await _strict(db_url)
    try:
        await holder.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (suspects[0],))
        got = await claim.claim(strict, ref, WorkerId(worker["id"]), 10, lease_s=30, solo=True)
        assert [(j.id, j.suspect) for j in got.jobs] == [(suspects[1], True)]
    finally:
        await holder.close()
        await strict.close()


async def test_the_cron_materializer_skips_a_schedule_another_replica_holds(
    db_url: str, conn: Conn
) -> None:
    queue = await make_queue(conn)
    held: dict[str, Any] = await new_schedule(conn, queue, name="held")
    free: dict[str, Any] = await new_schedule(conn, queue, name="free")
    due = max(held["next_run_at"], free["next_run_at"]) + timedelta(seconds=1)
    holder = await connect(db_url)
    strict = await _strict(db_url)
    try:
        # Another replica is firing `held` right now (it holds the schedule's row lock).
        await holder.execute(
            "SELECT id FROM scheduled_jobs WHERE id = %s FOR UPDATE", (held["id"],)
        )
        result = await materialize_due(strict, now=due)
        assert result.fired == 1
        fired = await (await conn.execute("SELECT schedule_id FROM jobs ORDER BY id")).fetchall()
        assert [r["schedule_id"] for r in fired] == [free["id"]]
    finally:
        await holder.close()
        await strict.close()
