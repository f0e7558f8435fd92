"""Throwaway databases cloned from a migrated template, for tests and benchmarks.

Migrating takes a second; cloning a template takes milliseconds. The template name carries a
hash of the migration files, so a changed migration builds a new template instead of reusing a
stale one.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from importlib import resources
from pathlib import Path

from psycopg import sql as pgsql

from jobyard.db import embedded, migrate
from jobyard.db.pool import connect_sync
from jobyard.db.urls import with_database

TEST_PGDATA = Path(".jobyard") / "test-pgdata"
CLONE_PREFIX = "jy_t_"
# Where the embedded test server keeps its data (tests of the harness point it elsewhere).
PGDATA_ENV = "JOBYARD_TEST_PGDATA"


def test_pgdata() -> Path:
    return Path(os.environ.get(PGDATA_ENV) or TEST_PGDATA)


def server_url(explicit: str | None) -> str:
    """An explicit server (JOBYARD_TEST_DATABASE_URL) or the embedded test server."""
    if explicit:
        return explicit
    return embedded.start(test_pgdata(), fast_unsafe=True)


def embedded_running() -> bool:
    """Whether the embedded test server is up (what a test session notes when it starts)."""
    return embedded.status(test_pgdata()).running


def stop_embedded() -> bool:
    """Stop the embedded test server; False if it was not running."""
    return embedded.stop(test_pgdata())


def _migrations_digest() -> str:
    digest = hashlib.sha256()
    folder = resources.files("jobyard.db") / "migrations" / "versions"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".py"):
            digest.update(entry.name.encode())
            digest.update(entry.read_bytes())
    return digest.hexdigest()[:12]


def ensure_template(admin_url: str) -> str:
    """Create (once per migration set) a migrated template database; return its name."""
    name = f"jy_tpl_{_migrations_digest()}"
    with connect_sync(admin_url) as admin:
        # Parallel test processes: one builds, the others wait and then find it.
        admin.execute("SELECT pg_advisory_lock(hashtext('jobyard.test-template'))")
        try:
            exists = admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if not exists:
                building = name + "_building"
                admin.execute(
                    pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        pgsql.Identifier(building)
                    )
                )
                admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(building)))
                migrate.upgrade(with_database(admin_url, building))
                admin.execute(
                    pgsql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        pgsql.Identifier(building), pgsql.Identifier(name)
                    )
                )
        finally:
            admin.execute("SELECT pg_advisory_unlock(hashtext('jobyard.test-template'))")
    return name


def create_clone(admin_url: str, template: str, prefix: str = CLONE_PREFIX) -> str:
    """A new database copied from `template`; returns its URL."""
    name = prefix + uuid.uuid4().hex[:16]
    with connect_sync(admin_url) as admin:
        admin.execute(
            pgsql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                pgsql.Identifier(name), pgsql.Identifier(template)
            )
        )
    return with_database(admin_url, name)


def drop_database(admin_url: str, url: str) -> None:
    from jobyard.db.urls import database_name

    with connect_sync(admin_url) as admin:
        admin.execute(
            pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                pgsql.Identifier(database_name(url))
            )
        )


def drop_stale_clones(admin_url: str, prefix: str = CLONE_PREFIX) -> int:
    """Remove clones left behind by a crashed run (none is in use at session start)."""
    with connect_sync(admin_url) as admin:
        rows = admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (prefix + "%",)
        ).fetchall()
        for row in rows:
            admin.execute(
                pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    pgsql.Identifier(row["datname"])
                )
            )
    return len(rows)
