"""Say so when a worker's event loop stops turning, and which handler stopped it.

An `async def` handler that calls something blocking (`time.sleep`, a synchronous HTTP client,
a long computation) holds the whole event loop: no other job runs, no heartbeat is sent, and
after `lease_s` the job's lease expires while it still runs. Nothing fails at that moment, so
without this the operator sees only lost leases later. A thread beside the loop notices that
the loop's tick is late, reads the loop thread's stack (`sys._current_frames`) and logs the
handler and the line it is stuck on; once the loop turns again it logs how long it stood. Both
moments also go to `on_stall` (from the watch thread: the loop cannot carry them), which the
worker writes to its row for the dashboard, the API, `/metrics` and `jobyard jobs why`.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from time import monotonic
from types import CodeType, FrameType
from typing import Any, Final

from jobyard.domain.models import LoopStall
from jobyard.logs import get_logger

log = get_logger("jobyard.worker")

# The loop ticks this often (at most): half the threshold, so a block is seen within half the
# threshold of crossing it. Every tick wakes the watch thread, which must take the GIL from a
# busy loop: twice a second is enough to name a blocked handler.
MAX_TICK_S: Final = 0.5
ADVICE: Final = (
    "no other job, heartbeat or claim runs meanwhile; blocking work belongs in a plain def "
    "handler, which runs in a thread"
)


@dataclass(frozen=True)
class Blocked:
    """Where the loop thread stood when the block was seen."""

    handler: str | None  # the innermost handler on the stack, if any
    # file:line in function: the handler's line, then the innermost frame if deeper
    where: str


def handler_codes(handlers: Iterable[tuple[str, Callable[..., Any]]]) -> dict[CodeType, str]:
    """Code object → handler name, from (name, TaskSpec.body) of the handlers that run on the
    loop (`async def`)."""
    codes: dict[CodeType, str] = {}
    for name, body in handlers:
        code = getattr(body, "__code__", None)
        if code is not None:
            codes[code] = name
    return codes


def _place(frame: FrameType) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def locate(frame: FrameType | None, codes: dict[CodeType, str]) -> Blocked:
    """The innermost registered handler on the loop thread's stack and the line it stands on,
    followed by the innermost frame when that is deeper (the library call it waits in)."""
    if frame is None:
        return Blocked(handler=None, where="unknown")
    walk: FrameType | None = frame
    while walk is not None:
        handler = codes.get(walk.f_code)
        if handler is not None:
            where = _place(walk) if walk is frame else f"{_place(walk)}, inside {_place(frame)}"
            return Blocked(handler=handler, where=where)
        walk = walk.f_back
    return Blocked(handler=None, where=_place(frame))


class LoopWatch:
    """`run()` on the loop ticks; a daemon thread checks the ticks. `jobs_of(handler)` names
    the job ids running that handler (read from the loop's state while the loop stands)."""

    def __init__(
        self,
        *,
        warn_after_s: float,
        codes: dict[CodeType, str],
        jobs_of: Callable[[str], list[int]],
        on_stall: Callable[[LoopStall], None] | None = None,
    ) -> None:
        self.warn_after_s = warn_after_s
        self.tick_s = min(MAX_TICK_S, warn_after_s / 2)
        self._codes = codes
        self._jobs_of = jobs_of
        self._ticked_at = monotonic()
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        # The tick a reported block started after; None while the loop turns.
        self._reported_tick: float | None = None
        self.blocks_seen = 0
        self._on_stall = on_stall
        self.last_stall: LoopStall | None = None

    async def run(self) -> None:
        self._loop_thread = threading.get_ident()
        self._ticked_at = monotonic()
        thread = threading.Thread(target=self._watch, name="jobyard-loop-watch", daemon=True)
        thread.start()
        try:
            while True:
                await asyncio.sleep(self.tick_s)
                self._ticked_at = monotonic()
        finally:
            self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.tick_s):
            ticked_at = self._ticked_at
            stood_s = monotonic() - ticked_at
            self._turned(ticked_at)
            # One tick late is the tick itself; count from the tick that should have come.
            if self._reported_tick is None and stood_s - self.tick_s >= self.warn_after_s:
                self._reported_tick = ticked_at
                self.blocks_seen += 1
                self._report(stood_s - self.tick_s)
        # The loop may have turned again just before it stopped the watch (a drain).
        self._turned(self._ticked_at)

    def _turned(self, ticked_at: float) -> None:
        """If a reported stall has ended (the loop ticked since), say how long it lasted."""
        if self._reported_tick is None or ticked_at == self._reported_tick:
            return
        blocked_s = round(ticked_at - self._reported_tick - self.tick_s, 2)
        log.warning("event loop turning again", blocked_s=blocked_s)
        self._reported_tick = None
        if self.last_stall is not None:
            self._tell(replace(self.last_stall, blocked_s=blocked_s, ongoing=False))

    def _report(self, blocked_s: float) -> None:
        frame = sys._current_frames().get(self._loop_thread)
        seen = locate(frame, self._codes)
        del frame
        jobs: list[int] = []
        if seen.handler is not None:
            try:
                jobs = self._jobs_of(seen.handler)
            except RuntimeError:  # the loop moved on while we read its state
                jobs = []
        log.warning(
            "event loop blocked"
            + (f" by handler {seen.handler!r}" if seen.handler else "")
            + f": {ADVICE}",
            blocked_s=round(blocked_s, 2),
            handler=seen.handler,
            job_ids=jobs,
            at=seen.where,
        )
        self._tell(
            LoopStall(
                number=self.blocks_seen,
                blocked_s=round(blocked_s, 2),
                ongoing=True,
                handler=seen.handler,
                job_ids=tuple(jobs),
                at=seen.where,
            )
        )

    def _tell(self, stall: LoopStall) -> None:
        self.last_stall = stall
        if self._on_stall is None:
            return
        try:
            self._on_stall(stall)
        except Exception:  # a report must never end the watch
            log.exception("could not record the event loop stall")
