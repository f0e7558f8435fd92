"""The plans of the statements a session runs, the triggers' own statements included.

auto_explain logs every plan with ANALYZE counts and sends the log to this client; a test reads
the scan nodes of the relations it cares about, with the node's detail lines (index condition,
heap fetches). Used where a guarantee is "this trigger reads that table by key" (migrations
0031–0033): only the nested plans show it, and for the ring's partitions only once they hold the
dead rows of a held horizon (`dead_rows_kept`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from psycopg import sql

from jobyard.db.pool import Conn, connect

_LOOPS = re.compile(r"loops=(\d+)\)")
_FETCHES = re.compile(r"Heap Fetches: (\d+)")
_REMOVED = re.compile(r"Rows Removed by Filter: (\d+)")


@dataclass(frozen=True)
class ScanNode:
    """One scan node of a plan: its line and the detail lines under it."""

    node: str
    details: list[str]

    @property
    def loops(self) -> int:
        if self.node.endswith("(never executed)"):
            return 0
        found = _LOOPS.search(self.node)
        assert found is not None, self.node
        return int(found.group(1))

    @property
    def heap_fetches(self) -> list[int]:
        """Heap tuples an index(-only) scan fetched (none listed for other scans)."""
        return [int(m.group(1)) for d in self.details if (m := _FETCHES.match(d))]

    @property
    def removed_by_filter(self) -> int:
        """Rows the scan read and its filter threw away."""
        return sum(int(m.group(1)) for d in self.details if (m := _REMOVED.match(d)))


@dataclass
class NestedPlans:
    """The plan of every statement this session runs, nested ones included."""

    texts: list[str] = field(default_factory=list)

    async def watch(self, conn: Conn) -> None:
        await conn.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
            "auto_explain.log_analyze = on", "auto_explain.log_timing = off",
            "client_min_messages = log",
        ):  # fmt: skip
            await conn.execute(f"SET {setting}")
        conn.add_notice_handler(lambda d: self.texts.append(d.message_primary or ""))

    def scans_of(self, partition_prefix: str) -> list[ScanNode]:
        """Each scan node of a partition named `<prefix>_<digit>`, in plan order."""
        return self._scans(rf"{re.escape(partition_prefix)}_\d")

    def scans_of_table(self, table: str) -> list[ScanNode]:
        """Each scan node of the table `table` itself, in plan order."""
        return self._scans(rf"{re.escape(table)}\b(?!_)")

    def _scans(self, relation: str) -> list[ScanNode]:
        pattern = re.compile(rf"Scan (?:using \S+ )?on {relation}")
        scans: list[ScanNode] = []
        for text in self.texts:
            lines = text.splitlines()
            for i, line in enumerate(lines):
                if pattern.search(line):
                    # The node's own details follow it, more indented than the node.
                    depth = len(line) - len(line.lstrip())
                    details = []
                    for detail in lines[i + 1 :]:
                        if len(detail) - len(detail.lstrip()) <= depth:
                            break
                        details.append(detail.strip())
                    scans.append(ScanNode(line.strip(), details))
        return scans


async def dead_rows_kept(
    conn: Conn, db_url: str, table: str, row: str, queue_id: int, per_partition: int
) -> Conn:
    """Fill each of `table`'s three slot partitions with `per_partition` rows (`row`: the select
    list for one row, `%(slot)s`, `-g` as its job id and `%(queue_id)s` in it), delete them while
    a REPEATABLE READ session keeps them, and VACUUM (ANALYZE) the partitions, as autovacuum does
    under a held horizon. Returns the session, its transaction still open."""
    holder = await connect(db_url)
    await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    await holder.execute("SELECT 1")  # the snapshot is taken by the first statement
    fill = sql.SQL("INSERT INTO {} SELECT " + row + " FROM generate_series(1, %(n)s) g").format(
        sql.Identifier(table)
    )
    for slot in range(3):
        await conn.execute(fill, {"slot": slot, "queue_id": queue_id, "n": per_partition})
    await conn.execute(sql.SQL("DELETE FROM {} WHERE job_id < 0").format(sql.Identifier(table)))
    partitions = sql.SQL(", ").join(sql.Identifier(f"{table}_{slot}") for slot in range(3))
    await conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(partitions))
    return holder
