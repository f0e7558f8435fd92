"""A dead letter is replayed once, also when two replays race (a double click, two operators).

The replay locks the dead letter's row and takes it only while it is not replayed yet: the
second of two concurrent replays waits for the first one's lock, re-reads the row and finds it
replayed (a 409 naming the job), so one failure never becomes two live jobs.
"""

from __future__ import annotations

import asyncio

import pytest

from jobyard.core import dlq, projects
from jobyard.db.pool import Conn, connect
from jobyard.domain.errors import Conflict
from jobyard.domain.ids import ProjectId
from tests.api.engine_helpers import dead_letter, make_worker


async def test_two_racing_replays_of_one_dead_letter_make_one_job(db_url: str, conn: Conn) -> None:
    project_id = await projects.resolve_project(conn, "acme/dlq", create=True)
    await projects.ensure_queues(conn, project_id, ["default"])
    worker = await make_worker(conn, project_id)
    dlq_id = await dead_letter(conn, project_id, worker)
    first = await connect(db_url, autocommit=True)
    second = await connect(db_url, autocommit=True)
    try:
        # The first replay holds the row lock in an open transaction while the second starts.
        await first.execute("BEGIN")
        replayed = await dlq.replay(first, ProjectId(project_id), dlq_id)
        racing = asyncio.create_task(dlq.replay(second, ProjectId(project_id), dlq_id))
        await asyncio.sleep(0.3)
        assert not racing.done(), "the second replay should wait for the first one's lock"
        await first.execute("COMMIT")
        with pytest.raises(Conflict, match=f"already replayed as job {replayed['id']}"):
            await racing
    finally:
        await first.close()
        await second.close()
    rows = await (
        await conn.execute("SELECT count(*) AS n FROM jobs WHERE status = 'queued'")
    ).fetchone()
    assert rows is not None and rows["n"] == 1
