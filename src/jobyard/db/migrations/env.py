"""Alembic environment: runs hand-written SQL migrations on the URL jobyard passes in."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

config = context.config
_configured = config.get_main_option("sqlalchemy.url")
if not _configured:
    raise RuntimeError("jobyard passes sqlalchemy.url programmatically")
url: str = _configured


def run_migrations_online() -> None:
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        # Two `jobyard migrate` at once: the second waits, then finds nothing to do.
        connection.exec_driver_sql("SELECT pg_advisory_lock(hashtext('jobyard.migrate'))")
        connection.commit()
        try:
            context.configure(connection=connection, transaction_per_migration=True)
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
        finally:
            connection.exec_driver_sql("SELECT pg_advisory_unlock(hashtext('jobyard.migrate'))")
            connection.commit()
    engine.dispose()


run_migrations_online()
