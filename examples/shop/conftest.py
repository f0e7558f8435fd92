from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import jobyard
import shop

pytest_plugins = ["jobyard.testing"]


@pytest.fixture
def app(jobyard_database_url: str) -> Iterator[jobyard.App]:
    """The shop's app on a fresh migrated database, with the shop's own table added."""
    with psycopg.connect(jobyard_database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (id serial PRIMARY KEY, email text UNIQUE NOT NULL)")
    shop.SENT.clear()
    with shop.app.using_database(jobyard_database_url):
        yield shop.app
