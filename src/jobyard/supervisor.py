"""Run jobyard's processes as children for a laptop (`jobyard up` / `jobyard demo`).

Forwards SIGINT/SIGTERM to every child, waits for them to drain, and exits when they have.
If one child dies, the others are stopped: a half-running system is worse than none.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

from jobyard.logs import get_logger

log = get_logger("jobyard.supervisor")


@dataclass(frozen=True)
class ChildSpec:
    name: str
    args: Sequence[str]


def supervise(children: Sequence[ChildSpec], env: Mapping[str, str], grace_s: float = 40.0) -> int:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    stopping = False

    def _forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:  # second signal: stop at once
            for proc in procs.values():
                proc.kill()
            return
        stopping = True
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGINT, _forward)
    signal.signal(signal.SIGTERM, _forward)
    for child in children:
        procs[child.name] = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "jobyard", *child.args], env={**os.environ, **env}
        )
        log.info("child started", child=child.name, pid=procs[child.name].pid)

    exit_code = 0
    while procs:
        for name, proc in list(procs.items()):
            code = proc.poll()
            if code is None:
                continue
            del procs[name]
            log.info("child exited", child=name, code=code)
            if code != 0:
                exit_code = exit_code or code
            if not stopping:
                stopping = True
                for other in procs.values():
                    other.send_signal(signal.SIGTERM)
                deadline = time.monotonic() + grace_s
                _ = deadline
        time.sleep(0.2)
    return exit_code
