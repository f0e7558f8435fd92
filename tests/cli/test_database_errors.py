"""Bad database URLs and unusable servers (issue 11, points 2 and 3): one line naming
host:port/database and the fix, a non-zero exit, from every command and from the SDK; a
worker waits for a server that is down and says what it waits for."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import jobyard
from jobyard.cli import app
from jobyard.db import migrate, testing
from jobyard.db.diagnose import target
from jobyard.db.pool import connect_sync
from jobyard.db.resolve import forget_checks
from jobyard.db.urls import with_database

PG15 = "postgresql://postgres@127.0.0.1:5432"
COMMANDS = [
    ["jobs"],
    ["jobs", "show", "1"],
    ["jobs", "cancel", "1"],
    ["enqueue", "noop"],
    ["queues", "list"],
    ["workers", "list"],
    ["schedules", "list"],
    ["schedules", "run-now", "1"],
    ["workers", "show", "1"],
    ["dlq", "list"],
    ["migrate"],
    ["seed"],
]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _pg15_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


needs_pg15 = pytest.mark.skipif(not _pg15_up(), reason="the machine's PostgreSQL 15 is not up")


def _cases() -> list[object]:
    port = _closed_port()
    ids = [
        "not-a-url",
        "not-postgres",
        "bad-port",
        "unknown-parameter",
        "closed-port",
        "no-database",
        "no-user",
        "no-host",
    ]
    cases = [
        (
            "notaurl",
            "JOBYARD_DATABASE_URL is not a PostgreSQL URL: 'notaurl'; use postgresql://",
            2,
        ),
        ("http://db.example/x", "is not a PostgreSQL URL: 'http://db.example/x'", 2),
        (f"{PG15[:-5]}:99999/test", "has an invalid port '99999'", 2),
        (
            f"{PG15}/test?foo=bar",
            'is not a usable PostgreSQL URL (invalid URI query parameter: "foo")',
            2,
        ),
        (
            f"postgresql://postgres@127.0.0.1:{port}/app",
            f"nothing accepts connections at 127.0.0.1:{port}/app: start PostgreSQL there or "
            "fix JOBYARD_DATABASE_URL (wrong host or port?)",
            1,
        ),
        (
            f"{PG15}/jobyard_no_such_db",
            'database "jobyard_no_such_db" does not exist on 127.0.0.1:5432: create it '
            "(createdb -h 127.0.0.1 -p 5432 -U postgres jobyard_no_such_db)",
            1,
        ),
        (
            "postgresql://jobyard_nobody:pw@127.0.0.1:5432/test",
            "authentication failed for user 'jobyard_nobody' at 127.0.0.1:5432/test",
            1,
        ),
        (
            "postgresql://postgres@no-such-host.invalid:5432/app",
            "cannot resolve host 'no-such-host.invalid' (no-such-host.invalid:5432/app)",
            1,
        ),
    ]
    return [pytest.param(*case, id=name) for name, case in zip(ids, cases, strict=True)]


@needs_pg15
@pytest.mark.parametrize(("url", "message", "code"), _cases())
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_names_the_server_and_the_fix(
    command: list[str], url: str, message: str, code: int
) -> None:
    forget_checks()
    result = CliRunner().invoke(app, command, env={"JOBYARD_DATABASE_URL": url, "COLUMNS": "300"})
    assert result.exit_code == code, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert ":pw@" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@needs_pg15
@pytest.mark.parametrize(("url", "message", "code"), _cases())
def test_the_sdk_raises_the_same_clear_errors(url: str, message: str, code: int) -> None:
    forget_checks()
    expected = jobyard.ConfigurationError if code == 2 else jobyard.DatabaseUnavailable
    sdk_message = message.replace("JOBYARD_DATABASE_URL", "the database URL")
    with pytest.raises(expected) as raised:
        jobyard.App(project="acme/shop", database_url=url).defer_sync("noop")
    assert sdk_message in raised.value.message
    # Configured by the environment instead, the message names the variable.
    os.environ["JOBYARD_DATABASE_URL"] = url
    try:
        with pytest.raises(expected) as raised:
            jobyard.App(project="acme/shop").defer_sync("noop")
    finally:
        del os.environ["JOBYARD_DATABASE_URL"]
    assert message in raised.value.message


@pytest.fixture
def plain_db(pg_admin_url: str) -> Iterator[str]:
    """An empty database (no schema) on the test server."""
    name = f"jy_plain_{uuid.uuid4().hex[:10]}"
    with connect_sync(pg_admin_url) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    url = with_database(pg_admin_url, name)
    try:
        yield url
    finally:
        testing.drop_database(pg_admin_url, url)


def test_a_configured_server_without_the_schema_asks_for_migrate(plain_db: str) -> None:
    forget_checks()
    cli = CliRunner(env={"JOBYARD_DATABASE_URL": plain_db, "COLUMNS": "300"})
    result = cli.invoke(app, ["jobs"])
    assert result.exit_code == 2, result.output
    assert f"{target(plain_db)} has no jobyard schema: run `jobyard migrate`" in result.output
    behind = _previous_revision()
    migrate.upgrade(plain_db, behind)
    forget_checks()
    result = cli.invoke(app, ["enqueue", "noop"])
    assert result.exit_code == 2, result.output
    head = migrate.head_revision()
    assert f"is at schema revision {behind}, this jobyard needs {head}" in result.output
    assert "run `jobyard migrate`" in result.output and "Traceback" not in result.output
    migrated = cli.invoke(app, ["migrate"])
    assert migrated.exit_code == 0 and f"migrated {behind} → {head}" in migrated.output
    forget_checks()
    # The schema passes now; what is left is that no project exists yet (like `jobs show`).
    listed = cli.invoke(app, ["jobs"])
    assert listed.exit_code == 2 and "jobyard migrate" not in listed.output, listed.output
    assert "does not exist in this database" in listed.output


def _previous_revision() -> str:
    from alembic.script import ScriptDirectory

    from jobyard.db.migrate import _config

    script = ScriptDirectory.from_config(_config("postgresql://unused"))
    head = script.get_revision(script.get_current_head())
    assert head is not None and isinstance(head.down_revision, str)
    return head.down_revision


# ----------------------------------------------------------------------------- worker


class _Forwarder(socketserver.ThreadingTCPServer):
    """A TCP port that forwards to the test server (TCP or Unix socket): "the server comes up"."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, upstream: str) -> None:
        self.upstream = upstream
        super().__init__(("127.0.0.1", port), _Pipe)


class _Pipe(socketserver.BaseRequestHandler):
    server: _Forwarder

    def handle(self) -> None:
        where = target(self.server.upstream)
        if where.socket_dir is not None:
            up = socket.socket(socket.AF_UNIX)
            up.connect(f"{where.socket_dir}/.s.PGSQL.{where.port}")
        else:
            up = socket.create_connection((where.host, int(where.port)))
        with up:
            pair = [self.request, up]
            while True:
                ready, _, _ = select.select(pair, [], [], 30)
                if not ready:
                    return
                for side in ready:
                    data = side.recv(65536)
                    if not data:
                        return
                    (up if side is self.request else self.request).sendall(data)


def _spawn_worker(url: str, log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "JOBYARD_DATABASE_URL": url,
        "JOBYARD_PROJECT": "test/proj",
        "JOBYARD_DRAIN_GRACE_S": "1",
    }
    env.pop("JOBYARD_DATABASE_ANNOUNCED", None)
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "jobyard", "worker"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=cwd,
        )


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if re.search(pattern, text):
            return text
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"no {pattern!r} in the worker's output:\n{log.read_text()}")


@pytest.mark.slow
def test_worker_waits_for_a_server_that_is_down_then_starts(db_url: str, tmp_path: Path) -> None:
    port = _closed_port()
    name = target(db_url).database
    url = f"postgresql://postgres:sekret@127.0.0.1:{port}/{name}"
    log = tmp_path / "worker.log"
    proc = _spawn_worker(url, log, tmp_path)
    try:
        _wait_for(
            log,
            rf"waiting for the database: nothing accepts connections at 127\.0\.0\.1:{port}/"
            rf"{name}.*retrying in 1 s \(attempt 2",
            proc,
            30,
        )
        threading.Thread(target=_Forwarder(port, db_url).serve_forever, daemon=True).start()
        text = _wait_for(log, r"worker started", proc, 60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    shown = (
        f"database: postgresql://postgres:***@127.0.0.1:{port}/{name} (from JOBYARD_DATABASE_URL)"
    )
    assert text.count(shown) == 1, text
    assert "sekret" not in text
    assert "database reachable; starting" in text
    assert "Traceback" not in text


@needs_pg15
def test_worker_stops_at_once_when_waiting_cannot_help(tmp_path: Path) -> None:
    """Issue 11: a wrong database name made the worker wait 30 s, then ask "is it running?"."""
    log = tmp_path / "worker.log"
    proc = _spawn_worker(f"{PG15}/jobyard_no_such_db", log, tmp_path)
    try:
        assert proc.wait(30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert 'error: database "jobyard_no_such_db" does not exist on 127.0.0.1:5432' in text
    assert "waiting" not in text and "Traceback" not in text
