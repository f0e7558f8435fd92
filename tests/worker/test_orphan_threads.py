"""A plain `def` handler that ignores its timeout keeps its thread after its run is recorded.

The worker has `concurrency` threads. Before, it counted such a thread as free: it claimed new
jobs for it, they waited in the executor's queue for a thread, and their own timeouts then
recorded them as `TimeoutError` without their handler ever having run, charging an attempt
each. Now an orphan thread holds its slot until it returns (and the log says so).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from jobyard.db.pool import Conn
from jobyard.worker.app import App
from jobyard.worker.context import JobContext
from tests.worker.helpers import PROJECT, eventually, job_status, rows, running_worker

STUCK_S = 4.0


async def _statuses(conn: Conn, ids: list[int]) -> list[str]:
    return [await job_status(conn, i) for i in ids]


async def test_a_thread_that_outlives_its_timeout_holds_its_slot_until_it_returns(
    db_url: str, conn: Conn
) -> None:
    app = App(project=PROJECT, database_url=db_url)
    ran: list[int] = []
    stuck_ended: list[float] = []
    quick_started: list[float] = []

    @app.task(timeout=0.5, max_attempts=1)
    def stuck(ctx: JobContext) -> Any:
        time.sleep(STUCK_S)  # never looks at ctx.is_cancelled()
        stuck_ended.append(time.monotonic())

    @app.task(timeout=2, max_attempts=3)
    def quick(ctx: JobContext, n: int) -> Any:
        quick_started.append(time.monotonic())
        ran.append(n)
        return n

    stuck_ids = [(await stuck.defer()).id for _ in range(2)]
    async with running_worker(db_url, app, concurrency=2) as worker:

        async def both_timed_out() -> bool:
            return await _statuses(conn, stuck_ids) == ["dead_letter", "dead_letter"]

        await eventually(both_timed_out, timeout=10)
        quick_ids = [(await quick.defer(n=i)).id for i in range(3)]
        await asyncio.sleep(0.5)  # a claim round or two
        if not stuck_ended:  # (on a host slow enough to have let them end, this proves nothing)
            # Both threads still sleep: nothing is claimed for them.
            assert worker.abandoned == 2
            assert await _statuses(conn, quick_ids) == ["queued"] * 3

        async def all_done() -> bool:
            return await _statuses(conn, quick_ids) == ["done"] * 3

        await eventually(all_done, timeout=20)
    assert sorted(ran) == [0, 1, 2]
    # No quick job started before one of the stuck threads had returned its slot.
    assert min(quick_started) >= min(stuck_ended)
    for job_id in quick_ids:
        (row,) = await rows(conn, "SELECT attempt, last_error FROM jobs WHERE id = %s", job_id)
        assert row == {"attempt": 1, "last_error": None}
