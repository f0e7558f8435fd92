"""Write what the loop watch sees to the worker's row, from the watch's own thread.

The heartbeat cannot carry a stall: it runs on the very loop that stands still. So each report
opens a connection of its own on an event loop of its own (`asyncio.run` in the watch thread),
writes one row and closes it. Stalls are rare and each costs one connection; a database that
does not answer within `WRITE_TIMEOUT_S` only costs the report, logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from jobyard.core import workers
from jobyard.db.pool import connect
from jobyard.domain.ids import WorkerId
from jobyard.domain.models import LoopStall
from jobyard.logs import get_logger
from jobyard.worker.retrying import RETRYABLE

log = get_logger("jobyard.worker")

WRITE_TIMEOUT_S: Final = 10.0
UNANSWERED: Final[tuple[type[BaseException], ...]] = (*RETRYABLE, TimeoutError)


class StallRecorder:
    """`recorder(stall)` writes it for the worker `worker_id()` names now (it re-registers
    under a new id after being declared dead)."""

    def __init__(self, url: str, worker_id: Callable[[], WorkerId]) -> None:
        self._url = url
        self._worker_id = worker_id

    def __call__(self, stall: LoopStall) -> None:
        worker_id = self._worker_id()
        if not worker_id:  # 0: not registered yet
            return
        try:
            asyncio.run(asyncio.wait_for(self._write(worker_id, stall), WRITE_TIMEOUT_S))
        except UNANSWERED as exc:
            log.warning("event loop stall not recorded: database unavailable", error=repr(exc))

    async def _write(self, worker_id: WorkerId, stall: LoopStall) -> None:
        conn = await connect(self._url, autocommit=True, application_name="jobyard-loop-watch")
        try:
            await workers.record_loop_stall(conn, worker_id, stall)
        finally:
            await conn.close()
