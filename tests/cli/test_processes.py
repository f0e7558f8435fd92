"""`jobyard demo` / `up` / `api` check their port before anything else (issue 11: the demo
printed its URL and login, then died 15 s later with exit 3 and one JSON log line)."""

from __future__ import annotations

import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobyard.cli import app


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("command", ["demo", "up", "api"])
def test_a_taken_port_stops_the_command_before_it_prints_or_starts_anything(
    command: str, taken_port: int, tmp_path: Path
) -> None:
    env = {"JOBYARD_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "300"}
    result = CliRunner().invoke(app, [command, "--port", str(taken_port)], env=env)
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        f"error: port {taken_port} on 127.0.0.1 is already in use (another jobyard or web server?)",
        f"hint: choose another: `jobyard {command} --port 8001` (or set JOBYARD_API_PORT)",
    ]
    assert not (tmp_path / "data").exists()  # no database was started for nothing


@pytest.mark.parametrize(
    ("host", "reason"),
    [("nosuchhost.invalid", "does not resolve"), ("192.0.2.1", "is not this machine's")],
)
def test_a_host_that_cannot_be_listened_on_is_named_not_the_port(
    host: str, reason: str, tmp_path: Path
) -> None:
    """Found by a user check (2026-12-05): such a host got the taken port's hint."""
    env = {"JOBYARD_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "300"}
    result = CliRunner().invoke(app, ["api", "--host", host, "--port", "18999"], env=env)
    assert result.exit_code == 2, result.output
    first, hint = result.output.splitlines()
    assert first.startswith(f"error: cannot listen on {host}: the address {reason}")
    assert (
        hint.startswith("hint: listen on one of this machine's addresses") and "--port" not in hint
    )


def test_the_port_comes_from_the_environment_too(taken_port: int, tmp_path: Path) -> None:
    env = {"JOBYARD_API_PORT": str(taken_port), "JOBYARD_DATA_DIR": str(tmp_path / "d")}
    result = CliRunner().invoke(app, ["demo"], env=env)
    assert result.exit_code == 2 and f"port {taken_port} on 127.0.0.1" in result.output


@pytest.mark.slow
def test_a_worker_at_a_terminal_logs_lines_not_json(db_url: str, tmp_path: Path) -> None:
    """A person starting `jobyard worker` reads console lines; JSON stays the default for
    everything else (services, CI, pipes) and JOBYARD_LOG_FORMAT still decides when set."""
    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "JOBYARD_LOG_FORMAT"}
    env |= {"JOBYARD_DATABASE_URL": db_url, "JOBYARD_PROJECT": "test/proj"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobyard", "worker"],
        env=env, cwd=tmp_path, stdout=secondary, stderr=secondary,
    )  # fmt: skip
    os.close(secondary)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while b"worker started" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 1)
            if ready:
                seen += os.read(primary, 65536)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
    text = seen.decode(errors="replace")
    line = next(x for x in text.splitlines() if "worker started" in x)
    assert not line.lstrip().startswith("{"), line
    assert "[info" in line, line
