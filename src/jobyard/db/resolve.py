"""Open "the database" the way every command and the SDK must: one rule, clear errors.

`resolve(settings)` applies the rule of `db/locate.py`, then:
- embedded: starts the server (created on first use) and migrates it to head — it is
  jobyard's own, so nobody has to run `jobyard migrate` for it;
- configured: connects once (a bad URL or an unusable server raises a one-line
  `ConfigurationError` / `DatabaseUnavailable` naming host:port/database and the fix) and
  checks the schema is at this jobyard's head (else one line naming `jobyard migrate`).
Checks run once per URL per process.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import psycopg

from jobyard.db import diagnose, embedded, migrate
from jobyard.db.locate import Location, locate
from jobyard.db.queries import sql
from jobyard.domain.errors import ConfigurationError
from jobyard.domain.settings import Settings

_checked: set[str] = set()
_lock = threading.Lock()
_REVISION = re.compile(r'^revision\s*(?::\s*str\s*)?=\s*["\']([^"\']+)["\']', re.MULTILINE)
_DOWN = re.compile(r'^down_revision\s*(?::[^=]+)?=\s*(None|["\']([^"\']+)["\'])', re.MULTILINE)


@dataclass(frozen=True)
class Resolved:
    url: str
    location: Location

    def describe(self) -> str:
        return self.location.describe()


def resolve(settings: Settings, *, check_schema: bool = True) -> Resolved:
    """The URL to use, after the checks above (see the module docstring)."""
    where = locate(settings)
    if where.url is None:
        url = embedded.start(where.pgdata)
        if check_schema:
            _once(url, lambda: _migrate_embedded(url))
        return Resolved(url, where)
    url = where.url
    source = where.reason.removeprefix("from ")
    diagnose.target(url, source)  # a malformed URL fails here, before any connection
    if check_schema:
        _once(url, lambda: require_head(url, source))
    return Resolved(url, where)


def _once(url: str, check: object) -> None:
    with _lock:
        if url in _checked:
            return
    assert callable(check)
    check()
    with _lock:
        _checked.add(url)


def forget_checks() -> None:
    """Tests: make the next resolve() check again."""
    with _lock:
        _checked.clear()


def head_revision() -> str:
    """The newest migration, read from the version files (no Alembic import: ~0.4 s saved on
    every start). tests/db checks it equals Alembic's own answer."""
    revisions, parents = _chain()
    heads = revisions - parents
    if len(heads) != 1:
        raise ConfigurationError(f"migrations have {len(heads)} heads: {sorted(heads)}")
    return heads.pop()


def _chain() -> tuple[set[str], set[str]]:
    versions = resources.files("jobyard.db") / "migrations" / "versions"
    revisions: set[str] = set()
    parents: set[str] = set()
    for entry in versions.iterdir():
        if not entry.name.endswith(".py"):
            continue
        text = entry.read_text(encoding="utf-8")
        rev = _REVISION.search(text)
        if rev is None:
            continue
        revisions.add(rev.group(1))
        down = _DOWN.search(text)
        if down is not None and down.group(2):
            parents.add(down.group(2))
    return revisions, parents


def schema_revision(url: str, source: str = "JOBYARD_DATABASE_URL") -> str | None:
    """The database's Alembic revision (None when jobyard never migrated it)."""
    where = diagnose.target(url, source)
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=diagnose.PROBE_TIMEOUT_S) as c:
            migrated = c.execute(sql("health_schema_migrated")).fetchone()
            if not migrated or not migrated[0]:
                return None
            row = c.execute(sql("health_schema_revision")).fetchone()
    except psycopg.OperationalError as exc:
        raise diagnose.explain(exc, where, source) from None
    return None if row is None else str(row[0])


def require_head(url: str, source: str = "JOBYARD_DATABASE_URL") -> None:
    """A configured server must be migrated by its operator: say so in one line if it is not."""
    current = schema_revision(url, source)
    head = head_revision()
    if current == head:
        return
    where = diagnose.target(url, source)
    if current is None:
        raise ConfigurationError(
            f"{where} has no jobyard schema: run `jobyard migrate` (with the same {source})",
            reason="not_migrated",
        )
    if current in _chain()[0]:
        raise ConfigurationError(
            f"{where} is at schema revision {current}, this jobyard needs {head}: "
            "run `jobyard migrate`",
            reason="schema_behind",
        )
    raise ConfigurationError(
        f"{where} is at schema revision {current}, newer than this jobyard knows ({head}): "
        "upgrade jobyard",
        reason="schema_ahead",
    )


def _migrate_embedded(url: str) -> None:
    if schema_revision(url, "the embedded server") != head_revision():
        migrate.upgrade(url)


def data_path(settings: Settings) -> Path:
    return locate(settings).data_dir
