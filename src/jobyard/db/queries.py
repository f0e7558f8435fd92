"""Named SQL, loaded once from db/sql/*.sql.

Each query is introduced by a line `-- name: noun_verb` followed by a one-line `-- ` description.
A name used in code but absent here fails at attribute access; a duplicate fails at import.

What is sent to the server is the query without its comments (`Query.statement`): psycopg
caches its parse of a query's placeholders only for texts up to 4 KB, and the commented claim is
5.4 KB, so each claim re-parsed it (about 50 µs of the worker's time, on the pickup's path).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from typing import LiteralString

_HEADER = re.compile(r"^--\s*name:\s*([a-z][a-z0-9_]*)\s*$", re.MULTILINE)

# A lexeme that may contain "--" or "/*" without starting a comment (a string, an escape
# string, a quoted identifier, a dollar-quoted body), or a comment. Only comments are removed.
_LEXEME = re.compile(
    r"""
    (?P<kept>
        (?<!\w)[Ee]'(?:[^'\\]|\\.|'')*'
      | '(?:[^']|'')*'
      | "(?:[^"]|"")*"
      | (?P<tag>\$(?:[A-Za-z_]\w*)?\$).*?(?P=tag)
    )
  | --[^\n]*
  | /\*.*?\*/
    """,
    re.VERBOSE | re.DOTALL,
)


def without_comments(text: str) -> str:
    """`text` with its SQL comments removed, and the lines they leave empty."""
    bare = _LEXEME.sub(lambda m: m.group("kept") or (" " if m.group(0)[0] == "/" else ""), text)
    return "\n".join(line.rstrip() for line in bare.splitlines() if line.strip())


@dataclass(frozen=True)
class Query:
    name: str
    description: str
    # As written in the file: comments, and the `-- explain:` hint, included.
    sql: LiteralString
    source: str
    # What is sent: `sql` without its comments.
    statement: LiteralString = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "statement", without_comments(self.sql))


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
    """The statement of a named query (its SQL without comments); KeyError names the missing
    query."""
    try:
        return QUERIES[name].statement
    except KeyError:
        raise KeyError(f"no named query {name!r} in jobyard/db/sql") from None
