"""Run a named query: the one way code above `db` executes SQL.

Every query runs on a cursor of its own with an explicit dict row factory, so core reads rows
by column name whatever row factory the connection was opened with (an SDK caller's own
connection is often the default tuple one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg.rows import dict_row

from jobyard.db.pool import Conn, Row
from jobyard.db.queries import sql


async def one(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql(name), params or {})
        return await cur.fetchone()


async def all_rows(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql(name), params or {})
        return await cur.fetchall()


async def execute(conn: Conn, name: str, params: Mapping[str, Any] | None = None) -> int:
    """Run a statement; return the number of rows it touched."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql(name), params or {})
        return cur.rowcount
