"""The caller's own connection, as core can use it: transactional defer with what people have.

Accepted: psycopg 3 `AsyncConnection` and `Connection` with any row factory, and SQLAlchemy 2
`Connection` / `AsyncConnection` on the psycopg driver. Core keeps using the async `Conn` it
always uses; a blocking connection is wrapped so its calls run in place (they block the loop
for the few statements of one defer, which is what a caller with a blocking connection wants).
Nothing here commits or rolls back: the job lives or dies with the caller's transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, cast

import psycopg
from psycopg.rows import RowFactory

from jobyard.db.pool import Conn
from jobyard.domain.errors import ConfigurationError

ACCEPTED = (
    "a psycopg 3 Connection or AsyncConnection, or a SQLAlchemy 2 Connection or AsyncConnection "
    "on the psycopg driver (postgresql+psycopg://)"
)


class _SyncCursor:
    """A blocking psycopg cursor behind the async methods `db.run` calls."""

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor

    async def __aenter__(self) -> _SyncCursor:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._cursor.close()

    async def execute(self, query: Any, params: Mapping[str, Any] | None = None) -> _SyncCursor:
        self._cursor.execute(query, params)
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount


class _SyncConnection:
    """A blocking psycopg connection with the async surface core uses (cursor, transaction)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self.info = conn.info

    def cursor(self, *, row_factory: RowFactory[Any]) -> _SyncCursor:
        return _SyncCursor(self._conn.cursor(row_factory=row_factory))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        with self._conn.transaction():
            yield

    async def execute(self, query: Any, params: Mapping[str, Any] | None = None) -> _SyncCursor:
        cursor = _SyncCursor(self._conn.cursor())
        return await cursor.execute(query, params)


def _wrap_sync(conn: psycopg.Connection[Any]) -> Conn:
    # The cast is the one place the blocking connection poses as an async one; _SyncConnection
    # implements exactly the calls db.run and core make on a Conn.
    return cast(Conn, _SyncConnection(conn))


def is_blocking(conn: object) -> bool:
    """Whether `conn` is a blocking connection (psycopg or SQLAlchemy sync)."""
    if isinstance(conn, psycopg.Connection):
        return True
    sa_sync, _ = _sqlalchemy_types()
    return sa_sync is not None and isinstance(conn, sa_sync)


@asynccontextmanager
async def adopted(conn: object) -> AsyncIterator[Conn]:
    """`conn` as a core `Conn`, inside the caller's transaction (begun if none is open yet)."""
    if isinstance(conn, psycopg.AsyncConnection):
        yield cast(Conn, conn)
        return
    if isinstance(conn, psycopg.Connection):
        yield _wrap_sync(conn)
        return
    sa_sync, sa_async = _sqlalchemy_types()
    if sa_async is not None and isinstance(conn, sa_async):
        # SQLAlchemy begins lazily; begin now so the caller's commit() covers the job.
        if not conn.in_transaction():
            await conn.begin()
        raw = await conn.get_raw_connection()
        yield _psycopg_driver(raw.driver_connection, psycopg.AsyncConnection)
        return
    if sa_sync is not None and isinstance(conn, sa_sync):
        if not conn.in_transaction():
            conn.begin()
        driver = conn.connection.driver_connection
        yield _wrap_sync(_psycopg_driver(driver, psycopg.Connection))
        return
    raise ConfigurationError(
        f"conn must be {ACCEPTED}; got {type(conn).__module__}.{type(conn).__qualname__}",
        field="conn",
    )


def _psycopg_driver(driver: object, kind: type[Any]) -> Any:
    if not isinstance(driver, kind):
        raise ConfigurationError(
            "the SQLAlchemy connection does not use the psycopg 3 driver; "
            "create its engine with a postgresql+psycopg:// URL",
            field="conn",
        )
    return driver


def _sqlalchemy_types() -> tuple[type[Any] | None, type[Any] | None]:
    """SQLAlchemy's connection classes, or None when SQLAlchemy (the optional extra) is absent."""
    try:
        from sqlalchemy.engine import Connection
    except ImportError:  # pragma: no cover - SQLAlchemy ships with alembic today
        return None, None
    try:
        from sqlalchemy.ext.asyncio import AsyncConnection
    except ImportError:  # pragma: no cover - the asyncio extension needs greenlet
        return Connection, None
    return Connection, AsyncConnection
