"""The embedded server can be stopped and started again, also within one process, and a data
directory tuned by an older release gets the settings added since."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from jobyard.db import embedded


@pytest.fixture
def pgdata() -> Iterator[Path]:
    """A data directory of its own, its server stopped at the end however the test ends."""
    # Under /tmp with open permissions: as root the server runs as another system user.
    root = Path(tempfile.mkdtemp(prefix="jy-embedded-"))
    os.chmod(root, 0o755)
    path = root / "pg"
    try:
        yield path
    finally:
        embedded.stop(path)


def test_embedded_server_stops_and_starts_again_in_one_process(pgdata: Path) -> None:
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


def test_a_directory_tuned_by_an_older_release_gets_the_settings_added_since(
    pgdata: Path,
) -> None:
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
