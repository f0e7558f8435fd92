"""What only a worker knows about its health reaches its row, where the API, the dashboard,
`/metrics` and `jobs why` read it: an async handler blocking the event loop (written by the loop
watch's thread while the loop stands, since the heartbeat runs on that loop) and `def` handlers
whose thread outlived their run (counted by every heartbeat)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from jobyard.core import why, workers
from jobyard.core.why import Explanation
from jobyard.db.pool import Conn, connect
from jobyard.domain.ids import JobId, ProjectId, WorkerId
from jobyard.domain.models import LoopStall
from jobyard.worker.app import App
from jobyard.worker.context import JobContext
from jobyard.worker.health import StallRecorder
from tests.worker.helpers import PROJECT, eventually, job_status, rows, running_worker

HEARTBEAT_S = 0.2


def _explain_elsewhere(
    url: str, project_id: int, job_id: int, heartbeat_s: float = HEARTBEAT_S
) -> Explanation:
    """`why` on an event loop of its own in another thread: the one here is blocked on purpose.
    `heartbeat_s`: the interval `why` assumes (a long one: the holder still counts as heard)."""

    async def explain() -> Explanation:
        conn = await connect(url, autocommit=True)
        try:
            return await why.explain(
                conn, ProjectId(project_id), JobId(job_id), heartbeat_interval_s=heartbeat_s
            )
        finally:
            await conn.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, explain()).result(30)


def _worker_row(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as c:
        row = c.execute(
            "SELECT loop_stalls, loop_stall, orphan_threads FROM workers"
            " WHERE status = 'active' ORDER BY id DESC LIMIT 1"
        ).fetchone()
    assert row is not None
    return row


async def test_a_blocked_event_loop_is_on_the_workers_row_and_in_why(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    seen: dict[str, Any] = {}

    @app.task()
    async def blocks_the_loop(ctx: JobContext, other: int) -> Any:
        # The mistake under test: a blocking wait in an async handler. It waits, blocking, for
        # its worker's row to say so, then asks `why` about itself and a job queued behind it.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            row = _worker_row(db_url)
            if row["loop_stall"] and row["loop_stall"]["ongoing"]:
                seen["during"] = row
                seen["heard"] = _explain_elsewhere(db_url, project_id, ctx.job_id, 60)
                break
            time.sleep(0.1)  # noqa: ASYNC251
        time.sleep(4 * HEARTBEAT_S)  # noqa: ASYNC251 - until the heartbeat is stale
        seen["self"] = _explain_elsewhere(db_url, project_id, ctx.job_id)
        seen["other"] = _explain_elsewhere(db_url, project_id, other)

    @app.task()
    async def waits(ctx: JobContext) -> Any:
        return None

    other = await waits.defer(delay=3600)  # scheduled: the worker leaves it alone meanwhile
    job = await blocks_the_loop.defer(other=other.id)
    (found,) = await rows(conn, "SELECT project_id FROM jobs WHERE id = %s", job.id)
    project_id = int(found["project_id"])
    async with running_worker(db_url, app, loop_block_warn_s=0.3, heartbeat_interval_s=HEARTBEAT_S):

        async def done() -> bool:
            return await job_status(conn, job.id) == "done"

        await eventually(done, timeout=30)

        async def ended() -> bool:
            stall = _worker_row(db_url)["loop_stall"]
            return bool(stall) and stall["ongoing"] is False

        await eventually(ended, timeout=10)
        after = _worker_row(db_url)

    during = seen["during"]
    assert during["loop_stalls"] >= 1
    stall = during["loop_stall"]
    assert stall["handler"] == "blocks_the_loop" and stall["job_ids"] == [job.id], stall
    assert "test_worker_health.py:" in stall["at"], stall
    # A loaded host may stall the loop again later for reasons of its own (a new number).
    if after["loop_stalls"] == during["loop_stalls"]:
        assert after["loop_stall"]["started_at"] == stall["started_at"]  # the end keeps it
        assert after["loop_stall"]["blocked_s"] >= 4 * HEARTBEAT_S, after

    heard = seen["heard"].reasons
    assert [r.code for r in heard] == ["running"], heard
    assert "(attempt 1 of 5); its event loop has stood still for " in heard[0].sentence, heard
    held = seen["self"].reasons
    assert [r.code for r in held] == ["holder_silent"], held
    assert "because its event loop has stood still for" in held[0].sentence, held[0].sentence
    assert f"blocked by handler 'blocks_the_loop' (job #{job.id}) at " in held[0].sentence
    assert held[0].details["loop_stall"]["handler"] == "blocks_the_loop"

    codes = [r.code for r in seen["other"].reasons]
    assert "worker_loop_blocked" in codes, seen["other"].reasons
    blocked = next(r for r in seen["other"].reasons if r.code == "worker_loop_blocked")
    assert "listens to queue 'default', but its event loop has stood still" in blocked.sentence
    assert "it claims nothing until that returns" in blocked.sentence, blocked.sentence


async def test_threads_that_outlive_their_run_are_counted_on_the_workers_row(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    gate = threading.Event()

    @app.task(timeout=0.3, max_attempts=1)
    def stuck(ctx: JobContext) -> Any:
        gate.wait(20)  # never looks at ctx.is_cancelled()

    ids = [(await stuck.defer()).id for _ in range(2)]
    async with running_worker(db_url, app, concurrency=3, heartbeat_interval_s=HEARTBEAT_S):

        async def counted() -> bool:
            return _worker_row(db_url)["orphan_threads"] == 2

        await eventually(counted, timeout=15)
        for job_id in ids:
            assert await job_status(conn, job_id) == "dead_letter"
        queued = await stuck.defer(delay=3600)
        (found,) = await rows(conn, "SELECT project_id FROM jobs WHERE id = %s", queued.id)
        said = await why.explain(
            conn, ProjectId(found["project_id"]), JobId(queued.id), heartbeat_interval_s=1
        )
        orphans = [r for r in said.reasons if r.code == "worker_orphan_threads"]
        assert len(orphans) == 1, said.reasons
        assert "2 of its 3 slots are held by handler threads" in orphans[0].sentence
        gate.set()

        async def returned() -> bool:
            return _worker_row(db_url)["orphan_threads"] == 0

        await eventually(returned, timeout=15)


async def test_a_paused_worker_claims_nothing_until_resumed(
    db_url: str, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobyard.worker")
    app = App(project=PROJECT, database_url=db_url)

    @app.task()
    async def tick(ctx: JobContext) -> Any:
        return None

    async with running_worker(
        db_url, app, heartbeat_interval_s=HEARTBEAT_S, poll_interval_s=0.1
    ) as worker:
        project, wid = worker.project_id, worker.worker_id
        await workers.set_paused(conn, project, wid, True, by="ops@example.test")

        async def told(what: str) -> bool:
            return any(what in r.getMessage() for r in caplog.records)

        await eventually(lambda: told("paused by an operator"), timeout=10)
        job = await tick.defer()
        await asyncio.sleep(10 * HEARTBEAT_S)  # heartbeats, polls and the job's NOTIFY
        assert await job_status(conn, job.id) == "queued"
        said = await why.explain(conn, project, JobId(job.id), heartbeat_interval_s=HEARTBEAT_S)
        paused = [r for r in said.reasons if r.code == "worker_paused"]
        assert len(paused) == 1 and "but ops@example.test paused it at" in paused[0].sentence

        await workers.set_paused(conn, project, wid, False, by="ops@example.test")

        async def done() -> bool:
            return await job_status(conn, job.id) == "done"

        await eventually(done, timeout=10)
        assert await told("resumed by an operator")


def test_a_stall_the_database_cannot_take_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The watch thread must go on watching when the report cannot be written."""
    caplog.set_level(logging.WARNING, logger="jobyard.worker")
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    recorder = StallRecorder(f"postgresql://postgres@127.0.0.1:{port}/x", lambda: WorkerId(1))
    recorder(LoopStall(number=1, blocked_s=2.0, ongoing=True, handler="h", job_ids=(), at="f:1"))
    said = [r.getMessage() for r in caplog.records]
    assert any("event loop stall not recorded: database unavailable" in m for m in said), said
    StallRecorder("postgresql://unused", lambda: WorkerId(0))(  # not registered yet: nothing
        LoopStall(number=1, blocked_s=2.0, ongoing=True, handler=None, job_ids=(), at="f:1")
    )
