"""What the database's sessions are doing, sampled several times a window.

The timeline's samples every few seconds say what changed; they cannot say why a window stalled.
This sampler reads `pg_stat_activity` and `pg_stat_progress_vacuum` on a connection of its own
every `interval_s` and adds up, until the timeline takes the counts at a window's end: how many
active sessions were seen on each wait event (`CPU` when on none), and for how many samples each
table was being vacuumed, and by whom (autovacuum, or a session such as a worker's own VACUUM).
A count times the interval is roughly seconds: "jobs was vacuumed by autovacuum for 18 of the 20
samples of this window" beside the window's pickup p99 is the test of a hypothesis.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Final

from jobyard.db import run
from jobyard.db.pool import Conn, connect

DEFAULT_INTERVAL_S: Final = 0.25


class ActivitySampler:
    def __init__(self, url: str, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self._url = url
        self.interval_s = interval_s
        self._conn: Conn | None = None
        self._task: asyncio.Task[None] | None = None
        self._waits: Counter[str] = Counter()
        self._vacuums: Counter[str] = Counter()
        self._ticks = 0

    async def start(self) -> None:
        self._conn = await connect(
            self._url, autocommit=True, application_name="jobyard-bench-activity"
        )
        self._task = asyncio.create_task(self._loop(self._conn))

    async def _loop(self, conn: Conn) -> None:
        while True:
            await self._tick(conn)
            await asyncio.sleep(self.interval_s)

    async def _tick(self, conn: Conn) -> None:
        for r in await run.all_rows(conn, "bench_activity_waits"):
            self._waits[str(r["wait"])] += int(r["sessions"])
        for r in await run.all_rows(conn, "bench_activity_vacuums"):
            self._vacuums[f"{r['relation']} ({r['by']})"] += 1
        self._ticks += 1

    def take(self) -> tuple[int, dict[str, int], dict[str, int]]:
        """The samples since the last take: their number, the wait counts, the vacuum counts."""
        taken = (self._ticks, dict(self._waits.most_common()), dict(self._vacuums.most_common()))
        self._ticks = 0
        self._waits.clear()
        self._vacuums.clear()
        return taken

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()
