"""The profiling scripts' own embedded PostgreSQL: jobyard's settings, plus the few a script
needs that only take effect after a restart (pg_stat_statements, commit timestamps); and the
pair of clones (head and an earlier revision) that the A/B scripts compare."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from psycopg import sql

from jobyard.db import embedded, migrate, testing
from jobyard.db.pool import connect_sync


def start_with(data_dir: Path, settings: Mapping[str, str]) -> str:
    """Start the server in `data_dir`; if any of `settings` differs, set it with ALTER SYSTEM
    and restart once. Returns the server's URL."""
    url = embedded.start(data_dir)
    with connect_sync(url, autocommit=True) as conn:
        differ = []
        for name, value in settings.items():
            row = conn.execute("SELECT current_setting(%s, true) AS v", (name,)).fetchone()
            if row is None or row["v"] != value:
                differ.append(name)
        for name in differ:
            conn.execute(
                # A list (shared_preload_libraries) is one literal per element, or the server
                # reads the whole string as one library's name.
                sql.SQL("ALTER SYSTEM SET {} = {}").format(
                    sql.Identifier(*name.split(".")),
                    sql.SQL(", ").join(sql.Literal(v.strip()) for v in settings[name].split(",")),
                )
            )
    if not differ:
        return url
    embedded.stop(data_dir)
    return embedded.start(data_dir)


@contextmanager
def head_and_base(base_revision: str, prefix: str) -> Iterator[dict[str, str]]:
    """Two clones of the test template on the tests' embedded server, `head` as migrated and
    `base` downgraded to `base_revision`: their URLs by name, dropped on exit."""
    admin = embedded.start(testing.test_pgdata())
    template = testing.ensure_template(admin)
    urls = {name: testing.create_clone(admin, template, prefix=prefix) for name in ("base", "head")}
    try:
        migrate.downgrade(urls["base"], base_revision)
        yield urls
    finally:
        for url in urls.values():
            testing.drop_database(admin, url)
