"""`make test` stops the embedded test server it started, and only that one.

Each case runs a real pytest session (a subprocess, as `make test` does) on a fast database
test, with the embedded server's data directory pointed at a directory of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobyard.db import embedded
from jobyard.db.testing import PGDATA_ENV

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
INNER_TEST = "tests/db/test_schema.py::test_claim_changes_at_most_n_rows"


@pytest.fixture
def pgdata() -> Iterator[Path]:
    # Under /tmp with open permissions: as root the server runs as another system user.
    root = Path(tempfile.mkdtemp(prefix="jy-session-"))
    os.chmod(root, 0o755)
    try:
        yield root / "pg"
    finally:
        embedded.stop(root / "pg")
        shutil.rmtree(root, ignore_errors=True)


def _run_suite(pgdata: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "JOBYARD_TEST_"))}
    env[PGDATA_ENV] = str(pgdata)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, INNER_TEST],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_suite_stops_the_server_it_started(pgdata: Path) -> None:
    """One process; under xdist (`make test`) the controller, which outlives its workers,
    does the same (checked by hand, docs/TESTING.md: a second initdb here costs minutes on
    a loaded machine)."""
    assert not embedded.status(pgdata).running
    _run_suite(pgdata)
    assert (pgdata / "PG_VERSION").exists()  # the suite did start it
    assert not embedded.status(pgdata).running


def test_the_suite_leaves_a_server_it_found_running(pgdata: Path) -> None:
    embedded.start(pgdata, fast_unsafe=True)
    _run_suite(pgdata)
    assert embedded.status(pgdata).running
