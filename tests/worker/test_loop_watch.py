"""An async handler that blocks the event loop is named in the worker's log, with its job and
the line it stands on; the same work in a plain `def` handler (a thread) is not reported."""

from __future__ import annotations

import logging
import re
import sys
import time
from types import FrameType
from typing import Any

import pytest

from jobyard.db.pool import Conn
from jobyard.worker.app import App
from jobyard.worker.context import JobContext
from jobyard.worker.loop_watch import locate
from tests.worker.helpers import PROJECT, eventually, job_status, running_worker

BLOCK_S = 1.5


async def _done(conn: Conn, job_id: int) -> bool:
    return await job_status(conn, job_id) == "done"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "event loop" in r.getMessage()]


def _report_and_end(caplog: pytest.LogCaptureFixture, handler: str) -> tuple[str, str] | None:
    """The first report naming `handler` and the end of that block (the next "turning again").
    A loaded host may stall the loop for other reasons too: those reports name no handler."""
    said = _warnings(caplog)
    for at, line in enumerate(said):
        if f"blocked by handler {handler!r}" in line:
            ends = [later for later in said[at + 1 :] if "event loop turning again" in later]
            return (line, ends[0]) if ends else None
    return None


async def _both_said(caplog: pytest.LogCaptureFixture) -> bool:
    return _report_and_end(caplog, "blocks_the_loop") is not None


async def test_a_blocking_async_handler_is_named_with_its_job_and_line(
    db_url: str, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobyard.worker")
    app = App(project=PROJECT, database_url=db_url)

    @app.task()
    async def blocks_the_loop(ctx: JobContext) -> Any:
        time.sleep(BLOCK_S)  # noqa: ASYNC251 - the mistake under test

    job = await blocks_the_loop.defer()
    async with running_worker(db_url, app, loop_block_warn_s=0.3) as worker:
        await eventually(lambda: _done(conn, job.id), timeout=20)
        await eventually(lambda: _both_said(caplog), timeout=5)
    assert worker.loop_watch.blocks_seen >= 1
    said = _report_and_end(caplog, "blocks_the_loop")
    assert said is not None
    blocked, turning = said
    assert "event loop blocked by handler 'blocks_the_loop'" in blocked, blocked
    assert f"'job_ids': [{job.id}]" in blocked, blocked
    assert "test_loop_watch.py:" in blocked and "in blocks_the_loop" in blocked, blocked
    assert "plain def handler" in blocked, blocked
    assert "event loop turning again" in turning, turning
    stood = float(re.search(r"'blocked_s': ([0-9.]+)", turning).group(1))  # type: ignore[union-attr]
    assert BLOCK_S - 0.5 <= stood <= BLOCK_S + 2, turning


async def test_the_same_work_in_a_thread_handler_is_not_reported(
    db_url: str, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobyard.worker")
    app = App(project=PROJECT, database_url=db_url)

    @app.task()
    def blocks_a_thread(ctx: JobContext) -> Any:
        time.sleep(BLOCK_S)

    job = await blocks_a_thread.defer()
    async with running_worker(db_url, app, loop_block_warn_s=0.3):
        await eventually(lambda: _done(conn, job.id), timeout=20)
    # The loop turned while the thread slept: no report names the handler (a loaded host may
    # still stall the loop for a moment, which is reported without one).
    assert not [w for w in _warnings(caplog) if "by handler" in w], _warnings(caplog)


def test_the_place_is_the_handler_s_line_then_the_call_it_waits_in() -> None:
    """The innermost frame alone may be a library's (psycopg waiting in `selectors`): the place
    starts at the handler's own line, and names the deeper frame after it."""

    def library_wait() -> FrameType:
        return sys._getframe()

    def handler() -> tuple[FrameType, int]:
        return library_wait(), sys._getframe().f_lineno

    innermost, line = handler()
    codes = {handler.__code__: "resize"}
    seen = locate(innermost, codes)
    here = __file__
    assert seen.handler == "resize"
    assert seen.where == (
        f"{here}:{line} in handler, inside {here}:{library_wait.__code__.co_firstlineno + 1} "
        "in library_wait"
    ), seen.where
    # Standing in the handler itself: its line alone; outside any handler: the innermost frame.
    assert locate(sys._getframe(), {sys._getframe().f_code: "h"}).where.count(" in ") == 1
    alone = locate(innermost, {})
    assert alone.handler is None and alone.where.endswith("in library_wait"), alone
