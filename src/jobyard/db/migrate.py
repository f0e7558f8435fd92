"""Alembic driven programmatically: `jobyard migrate` and the test template use these."""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

# Alembic and SQLAlchemy take most of a second to import; only migration commands need them,
# so they load inside the functions and `jobyard worker` or `jobyard api` start without them.
if TYPE_CHECKING:
    from alembic.config import Config


def sqlalchemy_url(url: str) -> str:
    """Alembic goes through SQLAlchemy; point it at the psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("jobyard.db") / "migrations"))
    # ConfigParser interpolation would choke on a '%' inside a URL-encoded password.
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Apply migrations up to `revision`. Idempotent: at head it does nothing."""
    from alembic import command

    command.upgrade(_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(_config(url), revision)


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config("postgresql://unused")).get_current_head()
    assert head is not None
    return head


def current_revision(url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import create_engine, pool

    engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            rev: str | None = MigrationContext.configure(connection).get_current_revision()
            return rev
    finally:
        engine.dispose()


def is_at_head(url: str) -> bool:
    return current_revision(url) == head_revision()
