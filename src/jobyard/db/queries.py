"""Named SQL, loaded once from db/sql/*.sql.

Each query is introduced by a line `-- name: noun_verb` followed by a one-line `-- ` description.
A name used in code but absent here fails at attribute access; a duplicate fails at import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import LiteralString

_HEADER = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Query:
    name: str
    description: str
    sql: LiteralString
    source: str


def _parse(source: str, text: str) -> dict[str, Query]:
    found: dict[str, Query] = {}
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.strip("\n").splitlines()
        description = ""
        if lines and lines[0].startswith("--"):
            description = lines[0].lstrip("- ").strip()
        sql = "\n".join(lines).strip().rstrip(";")
        if name in found:
            raise ValueError(f"duplicate query name {name!r} in {source}")
        found[name] = Query(name, description, sql, source)
    return found


def load_all() -> dict[str, Query]:
    queries: dict[str, Query] = {}
    folder = resources.files("jobyard.db") / "sql"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, query in _parse(entry.name, entry.read_text(encoding="utf-8")).items():
            if name in queries:
                raise ValueError(
                    f"query {name!r} defined in {queries[name].source} and {entry.name}"
                )
            queries[name] = query
    return queries


QUERIES: dict[str, Query] = load_all()


def sql(name: str) -> LiteralString:
    """The SQL text of a named query; KeyError names the missing query."""
    try:
        return QUERIES[name].sql
    except KeyError:
        raise KeyError(f"no named query {name!r} in jobyard/db/sql") from None
