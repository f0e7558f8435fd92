"""The embedded server can be stopped and started again, also within one process."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import psycopg

from jobyard.db import embedded


def test_embedded_server_stops_and_starts_again_in_one_process() -> None:
    # Under /tmp with open permissions: as root the server runs as another system user.
    root = Path(tempfile.mkdtemp(prefix="jy-embedded-"))
    os.chmod(root, 0o755)
    pgdata = root / "pg"
    try:
        url = embedded.start(pgdata)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert embedded.stop(pgdata)
        assert not embedded.status(pgdata).running
        assert not embedded.stop(pgdata)  # stopping twice is harmless
        url = embedded.start(pgdata)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 2").fetchone() == (2,)
        assert embedded.status(pgdata).running
    finally:
        embedded.stop(pgdata)


def test_a_directory_tuned_by_an_older_release_gets_the_settings_added_since() -> None:
    root = Path(tempfile.mkdtemp(prefix="jy-embedded-"))
    os.chmod(root, 0o755)
    pgdata = root / "pg"
    try:
        url = embedded.start(pgdata)
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SHOW max_wal_size").fetchone() == ("8GB",)
            conn.execute("ALTER SYSTEM RESET max_wal_size")
        embedded.stop(pgdata)
        # What releases before max_wal_size wrote: the marker without the settings' names.
        (pgdata / ".jobyard-tuned").write_text("tuned\n")
        url = embedded.start(pgdata)
        with psycopg.connect(url) as conn:
            assert conn.execute("SHOW max_wal_size").fetchone() == ("8GB",)
    finally:
        embedded.stop(pgdata)
