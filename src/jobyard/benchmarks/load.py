"""The load of the timeline scenarios: a producer at a fixed rate, a transaction that holds the
xmin horizon, and readers in long REPEATABLE READ transactions."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from typing import Final

from jobyard.db import run
from jobyard.db.pool import Conn, connect

# The producer inserts what is due every TICK_S: at 800 jobs/s, batches of 40, 20 a second.
TICK_S: Final = 0.05
# A reader pauses this long between scans, so four of them load the server without taking
# both cores away from the workers for the whole phase.
READER_PAUSE_S: Final = 0.5
# The tables the readers scan: the queue's tables, whatever the storage design calls them.
QUEUE_TABLE_PATTERNS: Final = ("jobs", "job\\_ready%", "job\\_held%")

Insert = Callable[[int], Awaitable[None]]
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class Producer:
    """Offers `rate` jobs a second, credited on the wall clock.

    At every tick it inserts what the schedule says is due by now minus what it has inserted,
    in chunks of at most `max_chunk`. A slow insert or a stalled host therefore shows up as a
    bigger batch in the next tick, never as a lower offered rate: `offered()` is what the
    schedule said, `enqueued` what was inserted so far.
    """

    def __init__(
        self,
        rate: float,
        insert: Insert,
        *,
        max_chunk: int,
        tick_s: float = TICK_S,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("the rate must be positive")
        self.rate = rate
        self.enqueued = 0
        self._insert = insert
        self._max_chunk = max_chunk
        self._tick_s = tick_s
        self._clock = clock
        self._sleep = sleep
        self._started: float | None = None
        self._stopped: float | None = None

    def offered(self) -> int:
        """Jobs the schedule has offered so far (frozen at stop())."""
        if self._started is None:
            return 0
        now = self._clock() if self._stopped is None else self._stopped
        return math.floor(self.rate * (now - self._started))

    def stop(self) -> None:
        if self._stopped is None:
            self._stopped = self._clock()

    async def run(self) -> None:
        """Insert on schedule until stop(); the schedule starts now."""
        # A stop() during an insert or a sleep ends the loop after one last catch-up round.
        self._started = self._clock()
        next_tick = self._started
        while True:
            due = self.offered() - self.enqueued
            while due > 0:
                n = min(due, self._max_chunk)
                await self._insert(n)
                self.enqueued += n
                due -= n
            if self._stopped is not None:
                return  # everything offered up to stop() is in
            next_tick += self._tick_s
            delay = next_tick - self._clock()
            if delay <= 0:
                # Behind: the next round inserts the backlog at once; ticks restart from now.
                next_tick = self._clock()
                delay = 0.0
            await self._sleep(delay)


class XidHolder:
    """One session that takes a transaction id and stays idle in its transaction."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: Conn | None = None
        self.xid: int | None = None

    async def hold(self) -> None:
        # Not autocommit: the query opens the transaction, which stays open until release().
        self._conn = await connect(self._url, application_name="jobyard-bench-hold")
        row = await run.one(self._conn, "bench_timeline_hold_xid")
        assert row is not None
        self.xid = int(row["xid"])

    async def release(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.rollback()
            await conn.close()


class Readers:
    """`count` sessions, each in one REPEATABLE READ transaction from start() to stop(),
    counting the queue's tables again and again (the active-readers cell)."""

    def __init__(self, url: str, count: int, pause_s: float = READER_PAUSE_S) -> None:
        self._url = url
        self._count = count
        self._pause_s = pause_s
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.scans = 0

    async def start(self) -> None:
        ready: list[asyncio.Future[None]] = []
        loop = asyncio.get_running_loop()
        for _ in range(self._count):
            future: asyncio.Future[None] = loop.create_future()
            ready.append(future)
            self._tasks.append(asyncio.create_task(self._read(future)))
        # Every reader has its snapshot before the phase counts as started.
        await asyncio.gather(*ready)

    async def _read(self, ready: asyncio.Future[None]) -> None:
        conn = await connect(self._url, application_name="jobyard-bench-reader")
        try:
            await run.execute(conn, "bench_timeline_count_function")
            await conn.commit()
            await run.execute(conn, "bench_timeline_repeatable_read")
            params = {"patterns": list(QUEUE_TABLE_PATTERNS)}
            await run.all_rows(conn, "bench_timeline_scan", params)
            self.scans += 1
            ready.set_result(None)
            while not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self._pause_s)
                if self._stop.is_set():
                    break
                await run.all_rows(conn, "bench_timeline_scan", params)
                self.scans += 1
            await conn.commit()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise
        finally:
            await conn.close()

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        self._tasks.clear()
