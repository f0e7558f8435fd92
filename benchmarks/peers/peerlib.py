"""Standard-library helpers shared by the Procrastinate and Celery peer benchmarks.

Imported by their bench.py from the peer's own venv (run.sh puts benchmarks/peers on the path);
it never imports jobyard. PgQueuer's bench.py predates it and stays self-contained.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final

POLL_S: Final = 1.0  # progress polling only; intervals come from the peer's own clocks
STALL_TIMEOUT_S: Final = 60.0
BATCH_CAP: Final = 10_000  # jobs per batch enqueue call: jobyard's batch cap
# A drain stops here if the queue is not empty yet: its rate is then the jobs finished over the
# time they took (Procrastinate on this host: ~35-100 jobs/s, 20,000 jobs would take minutes).
DRAIN_BUDGET_S: Final = 30.0


@dataclass(frozen=True)
class Sizes:
    """jobyard's sizes (harness.FULL or QUICK), handed over by run.sh so that they never drift."""

    single: int
    batch: int
    drain: int
    pickup: int
    pickup_gap_s: float
    drain_concurrency: int  # jobyard's `worker --concurrency` in the drains
    pickup_concurrency: int  # and in the pickup scenario

    @classmethod
    def from_dict(cls, given: dict[str, Any]) -> Sizes:
        return cls(**{f.name: given[f.name] for f in fields(cls)})


class BenchError(RuntimeError):
    pass


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text(encoding="utf-8").strip()
    except OSError:
        return "unknown"


class Workers:
    """Worker processes of the peer's own CLI, each logging to WORKDIR/worker-N.log."""

    def __init__(self, argv: list[str], processes: int, workdir: Path, env: dict[str, str]) -> None:
        self.argv, self.processes, self.workdir = argv, processes, workdir
        self.env = {**os.environ, **env}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[IO[bytes]] = []

    def log_path(self, i: int) -> Path:
        return self.workdir / f"worker-{i}.log"

    def start(self) -> None:
        for i in range(self.processes):
            logf = self.log_path(i).open("wb")
            self.logs.append(logf)
            self.procs.append(
                subprocess.Popen(  # noqa: S603 (our own argv)
                    self.argv,
                    cwd=self.workdir,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=logf,
                )
            )

    def check_alive(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise BenchError(
                    f"worker {i} exited early with {proc.returncode}; see {self.log_path(i)}"
                )

    def stop(self) -> list[int]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=30))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        for logf in self.logs:
            logf.close()
        return codes


def result_object(
    every: list[dict[str, float]],
    *,
    peer: str,
    version: str,
    runs: int,
    quick: bool,
    machine: dict[str, Any],
    harness: str,
    details: dict[str, Any],
) -> dict[str, Any]:
    """The object `jobyard bench --peer-command` reads: medians under jobyard's metric names."""
    details["runs"] = [{key: round(value, 2) for key, value in run.items()} for run in every]
    result: dict[str, Any] = {
        key: round(statistics.median(run[key] for run in every), 2) for key in every[0]
    }
    result.update(
        peer=peer,
        version=version,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        runs=runs,
        quick=quick,
        machine=machine,
        harness=harness,
        details=details,
    )
    return result


def say(peer: str, message: str) -> None:
    print(f"[{peer} bench] {message}", file=sys.stderr, flush=True)
