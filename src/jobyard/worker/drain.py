"""Signals → graceful drain (engine rule 6).

First SIGTERM/SIGINT: stop claiming, let in-flight jobs finish within the grace period, then
cancel the rest and release them to queued without charging the attempt; exit 0.
A second signal exits at once (status 130): the reaper returns whatever was still held.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from typing import Final

from jobyard.logs import get_logger

SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
HARD_EXIT_CODE: Final = 130

log = get_logger("jobyard.worker")


class SignalDrain:
    def __init__(self, on_drain: Callable[[], None]) -> None:
        self._on_drain = on_drain
        self.received = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self._handle, sig)

    def uninstall(self) -> None:
        if self._loop is None:
            return
        for sig in SIGNALS:
            self._loop.remove_signal_handler(sig)
        self._loop = None

    def _handle(self, sig: signal.Signals) -> None:
        self.received += 1
        if self.received == 1:
            log.info("drain requested", signal=sig.name)
            self._on_drain()
            return
        log.warning("second signal: exiting at once", signal=sig.name)
        sys.stderr.flush()
        os._exit(HARD_EXIT_CODE)
