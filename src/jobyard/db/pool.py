"""Connections and pools. Everything above `db` sees only the `Conn` alias and these helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from jobyard.db import diagnose
from jobyard.db.resolve import resolve
from jobyard.domain.settings import Settings

Conn: TypeAlias = psycopg.AsyncConnection[DictRow]
SyncConn: TypeAlias = psycopg.Connection[DictRow]
Pool: TypeAlias = AsyncConnectionPool[Conn]
Row: TypeAlias = dict[str, Any]

# Errors that mean "the server went away"; callers reconnect and retry instead of crashing.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


def resolve_database_url(settings: Settings, *, check_schema: bool = True) -> str:
    """The database the rule of `db/locate.py` finds: the configured server (checked: reachable,
    schema at head) or the embedded one (started and migrated on demand). Errors are one-line
    `ConfigurationError` / `DatabaseUnavailable` messages (db/diagnose.py)."""
    return resolve(settings, check_schema=check_schema).url


async def connect(url: str, *, autocommit: bool = False, application_name: str = "jobyard") -> Conn:
    """A connection; a failure raises diagnose.ConnectFailed (a DatabaseUnavailable that is
    also a psycopg.OperationalError) naming host:port/database and the fix."""
    where = diagnose.target(url, "the database URL")
    try:
        conn: Conn = await psycopg.AsyncConnection.connect(
            url, autocommit=autocommit, row_factory=dict_row, application_name=application_name
        )
    except psycopg.OperationalError as exc:
        raise diagnose.explain(exc, where, "the database URL") from exc
    return conn


def connect_sync(url: str, *, autocommit: bool = True) -> SyncConn:
    where = diagnose.target(url, "the database URL")
    try:
        conn: SyncConn = psycopg.Connection.connect(
            url, autocommit=autocommit, row_factory=dict_row
        )
    except psycopg.OperationalError as exc:
        raise diagnose.explain(exc, where, "the database URL") from exc
    return conn


async def open_pool(
    url: str, *, min_size: int = 1, max_size: int = 10, name: str = "jobyard"
) -> Pool:
    pool: Pool = AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"row_factory": dict_row, "autocommit": True, "application_name": name},
        open=False,
        name=name,
    )
    await pool.open(wait=True, timeout=30)
    return pool


@asynccontextmanager
async def transaction(conn: Conn) -> AsyncIterator[Conn]:
    """A transaction on `conn` (a savepoint if one is already open)."""
    async with conn.transaction():
        yield conn
