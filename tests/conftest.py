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
