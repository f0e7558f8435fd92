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
    kill_at: float | None = None  # set once stopping: when stragglers are killed

    def _stop_all() -> None:
        nonlocal kill_at
        kill_at = time.monotonic() + grace_s
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    def _on_signal(_signum: int, _frame: FrameType | None) -> None:
        if kill_at is not None:  # second signal: stop at once
            for proc in procs.values():
                proc.kill()
            return
        _stop_all()

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    for child in children:
        procs[child.name] = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "jobyard", *child.args],
            env={**os.environ, **env},
            # Their own process group: Ctrl-C in a terminal signals the whole foreground group,
            # so children would get it twice (from the terminal and from us) and take the
            # second as "exit at once". Only the supervisor hears it, and forwards one SIGTERM.
            process_group=0,
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
            if kill_at is None:
                _stop_all()
        if kill_at is not None and time.monotonic() > kill_at:
            for name, proc in procs.items():
                log.warning("child did not stop within the grace period; killing it", child=name)
                proc.kill()
            kill_at = float("inf")  # killed; wait for them to be reaped
        time.sleep(0.2)
    return exit_code
