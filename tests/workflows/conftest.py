"""Real worker processes for the workflow tests (the spawn fixture of tests/acceptance)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.worker.helpers import PROJECT

REPO = Path(__file__).resolve().parents[2]
APP = "tests.workflows.apps:app"


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Any]:
    """`workers(url, n, concurrency=...)` starts n `jobyard worker` processes; all are killed
    at teardown. Returns the Popen objects."""
    started: list[subprocess.Popen[bytes]] = []

    def _spawn(url: str, n: int = 1, *, concurrency: int = 10) -> list[subprocess.Popen[bytes]]:
        env = {
            **os.environ,
            "JOBYARD_DATABASE_URL": url,
            "JOBYARD_PROJECT": PROJECT,
            "JOBYARD_HEARTBEAT_INTERVAL_S": "0.5",
            "JOBYARD_LEASE_S": "2",
            "JOBYARD_POLL_INTERVAL_S": "0.5",
            "JOBYARD_DRAIN_GRACE_S": "2",
            "JOBYARD_LOG_LEVEL": "warning",
        }
        procs = []
        for _ in range(n):
            with (tmp_path / f"worker-{len(started)}.log").open("wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "jobyard", "worker", "--app", APP,
                     "--queues", "default", "--concurrency", str(concurrency)],
                    cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
            started.append(proc)
            procs.append(proc)
        return procs

    yield _spawn
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
