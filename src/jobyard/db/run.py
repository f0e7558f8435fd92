"""Run a named query: the one way code above `db` executes SQL.

Every query runs on a cursor of its own with an explicit dict row factory, so core reads rows
by column name whatever row factory the connection was opened with (an SDK caller's own
connection is often the default tuple one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg import sql as pgsql
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


# SKIP_LOCKED: a table another VACUUM (autovacuum, another worker) or a rotation holds is passed
# over, never waited for. INDEX_CLEANUP ON: the dead index entries are the point, and AUTO skips
# the indexes when few heap pages hold dead rows. TRUNCATE false: giving back the heap's empty
# tail takes an ACCESS EXCLUSIVE lock that claims would queue behind. PARALLEL 0: no extra
# processes on a small machine for tables this size.
_VACUUM = pgsql.SQL("VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false, PARALLEL 0) {}")


async def vacuum(conn: Conn, schema_name: str, table_name: str) -> None:
    """VACUUM one table, with the options above; `conn` must be in autocommit mode (VACUUM
    cannot run inside a transaction block). The table's name is quoted, never interpolated."""
    await conn.execute(_VACUUM.format(pgsql.Identifier(schema_name, table_name)))
