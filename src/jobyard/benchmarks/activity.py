"""What the database's sessions are doing, sampled several times a window.

The timeline's samples every few seconds say what changed; they cannot say why a window stalled.
This sampler reads `pg_stat_activity` and the VACUUM and ANALYZE progress views on a connection
of its own every `interval_s` and adds up, until the timeline takes the counts at a window's
end: how many active sessions were seen on each wait event (`CPU` when on none), how many were
running each named query (matched by its text; `other` when it is none of jobyard's), and for
how many samples each table was being vacuumed or analyzed, and by whom (autovacuum, or a
session such as a worker's own VACUUM). A count over the number of samples is a share of the
window: "jobs was analyzed by autovacuum in 6 of the 8 samples of this window, and the workers
were all in the claim" beside the window's pickup p99 is the test of a hypothesis.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from jobyard.db import run
from jobyard.db.pool import Conn, connect
from jobyard.db.queries import QUERIES

DEFAULT_INTERVAL_S: Final = 0.25
# pg_stat_activity keeps the first track_activity_query_size bytes (1 kB by default) of a
# statement; this many characters (under 1 kB in ASCII) tell jobyard's named queries apart.
_HEAD: Final = 900
# The server sees a statement as psycopg sends it: each placeholder (`%(name)s`, `%s`) as `$n`,
# and `%%` as `%`. Both sides are compared with every placeholder as `$`.
_CLIENT_PLACEHOLDER: Final = re.compile(r"%\(\w+\)s|%s|%%")
_SERVER_PLACEHOLDER: Final = re.compile(r"\$\d+")


def _as_sent(statement: str) -> str:
    return _CLIENT_PLACEHOLDER.sub(lambda m: "%" if m.group(0) == "%%" else "$", statement)


def _statement_names() -> dict[str, str]:
    names: dict[str, list[str]] = {}
    for name, query in QUERIES.items():
        names.setdefault(_as_sent(query.statement)[:_HEAD], []).append(name)
    return {head: "|".join(sorted(n)) for head, n in names.items()}


_NAMES: Final = _statement_names()


def statement_name(text: str) -> str:
    """The named query whose statement `text` is (or starts like), else `other`."""
    return _NAMES.get(_SERVER_PLACEHOLDER.sub("$", text)[:_HEAD], "other")


@dataclass(frozen=True)
class Activity:
    samples: int = 0  # how many times the sessions were looked at
    waits: dict[str, int] = field(default_factory=dict)  # active sessions seen on each
    statements: dict[str, int] = field(default_factory=dict)  # active clients in each query
    maintenance: dict[str, int] = field(default_factory=dict)  # looks that saw each in progress


class ActivitySampler:
    def __init__(self, url: str, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self._url = url
        self.interval_s = interval_s
        self._conn: Conn | None = None
        self._task: asyncio.Task[None] | None = None
        self._waits: Counter[str] = Counter()
        self._statements: Counter[str] = Counter()
        self._maintenance: Counter[str] = Counter()
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
            self._waits[str(r["wait"])] += 1
            if r["query"] is not None:
                self._statements[statement_name(str(r["query"]))] += 1
        for r in await run.all_rows(conn, "bench_activity_maintenance"):
            self._maintenance[f"{r['relation']} ({r['by']})"] += 1
        self._ticks += 1

    def take(self) -> Activity:
        """What the samples since the last take saw."""
        taken = Activity(
            samples=self._ticks,
            waits=dict(self._waits.most_common()),
            statements=dict(self._statements.most_common()),
            maintenance=dict(self._maintenance.most_common()),
        )
        self._ticks = 0
        for counter in (self._waits, self._statements, self._maintenance):
            counter.clear()
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
