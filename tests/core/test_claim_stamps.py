"""A claim stamps its run with the time of its own statement, not of the transaction around it.

Under max_concurrency the claim runs in a transaction that first waits for the queue's lock;
with now() the run's claimed_at, started_at and lease were dated before that wait, so a claim
that waited L seconds got a lease L seconds short (and a wrong start in the run's row).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from jobyard.core import claim
from jobyard.db.pool import Conn, connect
from jobyard.domain.ids import QueueId, WorkerId
from jobyard.domain.models import QueueRef
from tests.factories import make_job, make_queue, make_worker

WAIT_S = 1.0
LEASE_S = 30.0


async def test_a_claim_that_waited_for_the_queue_lock_is_stamped_after_the_wait(
    db_url: str, conn: Conn
) -> None:
    queue = await make_queue(conn, max_concurrency=5)
    worker = await make_worker(conn, project_id=queue["project_id"])
    job = await make_job(conn, queue=queue)
    ref = QueueRef(QueueId(queue["id"]), queue["name"], 0, False, 5)
    holder = await connect(db_url)
    claimer = await connect(db_url, autocommit=True)
    try:
        # Another claimer holds the queue's lock for WAIT_S.
        await holder.execute("SELECT 1 FROM queues WHERE id = %s FOR UPDATE", (queue["id"],))
        waiting = asyncio.create_task(
            claim.claim_batch(claimer, ref, WorkerId(worker["id"]), 1, lease_s=LEASE_S, start=True)
        )
        await asyncio.sleep(WAIT_S)
        cur = await holder.execute("SELECT clock_timestamp() AS released")
        released = (await cur.fetchone() or {})["released"]  # type: ignore[call-overload]
        await holder.commit()
        (got,) = await asyncio.wait_for(waiting, 30)
    finally:
        await holder.close()
        await claimer.close()
    assert got.id == job["id"]
    cur = await conn.execute(
        "SELECT claimed_at, started_at, lock_expires_at FROM jobs WHERE id = %s", (job["id"],)
    )
    row = await cur.fetchone()
    assert row is not None
    assert row["claimed_at"] >= released, (row, released)
    assert row["started_at"] == row["claimed_at"]
    assert row["lock_expires_at"] == row["claimed_at"] + timedelta(seconds=LEASE_S)
