"""Run `python -m jobyard api` as a real subprocess on a free loopback port (for tests that need
separate API processes: shared rate limits, log capture)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.api.conftest import TEST_SECRET


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ApiProcess:
    proc: subprocess.Popen[bytes]
    base_url: str
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")


@contextmanager
def api_process(
    db_url: str,
    log_dir: Path,
    *,
    log_level: str = "info",
    timeout_s: float = 60.0,
    env: dict[str, str] | None = None,
) -> Iterator[ApiProcess]:
    port = free_port()
    stderr_path = log_dir / f"api-{port}.log"
    env = {
        **os.environ,
        "JOBYARD_DATABASE_URL": db_url,
        "JOBYARD_SECRET_KEY": TEST_SECRET,
        "JOBYARD_ENV": "test",
        "JOBYARD_LOG_LEVEL": log_level,
        "JOBYARD_LOG_FORMAT": "json",
        **(env or {}),
    }
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobyard", "api", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    api = ApiProcess(proc, f"http://127.0.0.1:{port}", stderr_path)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"api exited with {proc.returncode}:\n{api.stderr()}")
            try:
                if httpx.get(f"{api.base_url}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"api did not start in {timeout_s} s:\n{api.stderr()}")
            time.sleep(0.1)
        yield api
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
