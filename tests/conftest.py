"""Real PostgreSQL for every test: the embedded server, or JOBYARD_TEST_DATABASE_URL.

`db_url` gives each test its own database cloned from a migrated template, so tests can commit,
LISTEN/NOTIFY, race and spawn processes without seeing each other.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from jobyard.db import testing
from jobyard.db.pool import Conn, connect
from jobyard.logs import configure_logging

_EMBEDDED_WAS_RUNNING = pytest.StashKey[bool]()


def _owns_the_session(config: pytest.Config) -> bool:
    # Under xdist the controller (no `workerinput`) outlives its workers: it decides.
    return not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if _owns_the_session(config) and not os.environ.get("JOBYARD_TEST_DATABASE_URL"):
        config.stash[_EMBEDDED_WAS_RUNNING] = testing.embedded_running()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the embedded test server if this run started it (every test, every xdist worker,
    is done by now); one that was already running, or an explicit server, is left alone."""
    was_running = config.stash.get(_EMBEDDED_WAS_RUNNING, True)
    if _owns_the_session(config) and not was_running and testing.embedded_running():
        testing.stop_embedded()


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    return testing.server_url(os.environ.get("JOBYARD_TEST_DATABASE_URL"))


@pytest.fixture(scope="session")
def pg_template(pg_admin_url: str) -> str:
    return testing.ensure_template(pg_admin_url)


@pytest.fixture
def db_url(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    url = testing.create_clone(pg_admin_url, pg_template)
    try:
        yield url
    finally:
        testing.drop_database(pg_admin_url, url)


@pytest.fixture
async def conn(db_url: str) -> AsyncIterator[Conn]:
    """An autocommit connection to this test's own database."""
    connection = await connect(db_url, autocommit=True)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture(autouse=True, scope="session")
def _quiet_logs() -> None:
    configure_logging("warning", "json")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`soak` tests (the long runs of `make test-slow`) run only when `-m` names them."""
    if "soak" in (config.getoption("markexpr") or ""):
        return
    soak = [item for item in items if item.get_closest_marker("soak")]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]
