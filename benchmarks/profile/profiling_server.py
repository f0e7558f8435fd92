"""The profiling scripts' own embedded PostgreSQL: jobyard's settings, plus the few a script
needs that only take effect after a restart (pg_stat_statements, commit timestamps)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from psycopg import sql

from jobyard.db import embedded
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
