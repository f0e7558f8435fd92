"""Real `python -m jobyard worker` processes for the drain and pickup measurements."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import IO

from jobyard.domain.errors import JobyardError

# A drained worker exits within its grace period; after this the harness stops waiting.
STOP_TIMEOUT_S = 30.0


class BenchError(JobyardError):
    """The benchmark could not run."""


@dataclass
class WorkerProcesses:
    """N worker processes on one database and queue, each logging to its own temp file."""

    url: str
    project: str
    queue: str
    concurrency: int
    count: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)

    def start(self) -> None:
        env = {
            **os.environ,
            "JOBYARD_DATABASE_URL": self.url,
            "DATABASE_URL": self.url,
            "JOBYARD_PROJECT": self.project,
        }
        argv = [
            sys.executable,
            "-m",
            "jobyard",
            "worker",
            "--queues",
            self.queue,
            "--concurrency",
            str(self.concurrency),
            "--project",
            self.project,
        ]
        for _ in range(self.count):
            # Closed in stop(); read back only when a worker dies early.
            log = tempfile.TemporaryFile(prefix="jobyard-bench-worker-")  # noqa: SIM115
            self.logs.append(log)
            self.procs.append(
                subprocess.Popen(  # noqa: S603 - our own interpreter and module
                    argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
                )
            )

    def check_alive(self) -> None:
        """Raise BenchError with the log tail if a worker exited before it was told to."""
        for proc, log in zip(self.procs, self.logs, strict=True):
            code = proc.poll()
            if code is not None:
                raise BenchError(f"a worker exited early with code {code}: {_tail(log)}")

    def stop(self) -> list[int]:
        """SIGTERM (graceful drain), then wait; kill what is still running after the timeout."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: list[int] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=STOP_TIMEOUT_S))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        for log in self.logs:
            with contextlib.suppress(OSError):
                log.close()
        return codes


def _tail(log: IO[bytes], limit: int = 2000) -> str:
    log.flush()
    log.seek(0)
    text = log.read().decode("utf-8", errors="replace")
    return text[-limit:].strip() or "(no output)"
