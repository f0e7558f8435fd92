"""Run a named query: the one way code above `db` executes SQL."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobyard.db.pool import Conn, Row
from jobyard.db.queries import sql


async def one(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
    cur = await conn.execute(sql(name), params or {})
    return await cur.fetchone()


async def all_rows(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
    cur = await conn.execute(sql(name), params or {})
    return await cur.fetchall()


async def execute(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> int:
    """Run a statement; return the number of rows it touched."""
    cur = await conn.execute(sql(name), params or {})
    return cur.rowcount
