"""`jobyard demo` / `up` / `api` check their port before anything else (issue 11: the demo
printed its URL and login, then died 15 s later with exit 3 and one JSON log line)."""

from __future__ import annotations

import socket
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


def test_the_port_comes_from_the_environment_too(taken_port: int, tmp_path: Path) -> None:
    env = {"JOBYARD_API_PORT": str(taken_port), "JOBYARD_DATA_DIR": str(tmp_path / "d")}
    result = CliRunner().invoke(app, ["demo"], env=env)
    assert result.exit_code == 2 and f"port {taken_port} on 127.0.0.1" in result.output
