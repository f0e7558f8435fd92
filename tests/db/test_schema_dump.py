"""schema.sql is the migrations at head, migrations reverse cleanly, and reset rebuilds the schema."""

from __future__ import annotations

import difflib
import uuid
from importlib import resources
from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from psycopg import sql as pgsql
from typer.testing import CliRunner

from jobyard.cli import app
from jobyard.db import dump, migrate, testing
from jobyard.db.pool import connect_sync
from jobyard.db.urls import with_database

FIXED_RAW_DUMP = """--
-- PostgreSQL database dump
--

\\restrict hFziYXpWK4uBCxwJibzGjR2lsVDeJ288cFhahnLvyovYEMRRsSNg2KwDo6sIyab

-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 18.6

SET statement_timeout = 0;
SET transaction_timeout = 0;
SELECT pg_catalog.set_config('search_path', '', false);
SET row_security = off;

--
-- Name: t; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.t (
    id bigint NOT NULL,
    slot smallint CONSTRAINT p_slot_not_null NOT NULL,
    CONSTRAINT t_id_check CHECK ((id > 0))
);



ALTER TABLE ONLY public.t ALTER COLUMN id SET (pg_attver=35745472);
ALTER TABLE ONLY public.t ALTER COLUMN id SET (n_distinct=-1, pg_attver=35745472);
ALTER TABLE public.t ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.t_id_seq
);

--
-- PostgreSQL database dump complete
--

\\unrestrict hFziYXpWK4uBCxwJibzGjR2lsVDeJ288cFhahnLvyovYEMRRsSNg2KwDo6sIyab

"""


def _flat(text: str) -> str:
    """Rich wraps long lines at the terminal width; compare words, not line breaks."""
    return " ".join(text.split())


def _diff(expected: str, actual: str, labels: tuple[str, str] = ("expected", "actual")) -> str:
    lines = difflib.unified_diff(expected.splitlines(), actual.splitlines(), *labels, lineterm="")
    return "\n".join(list(lines)[:80])


def test_normalize_drops_version_noise_and_keeps_the_ddl() -> None:
    assert dump.normalize(FIXED_RAW_DUMP) == (
        "CREATE TABLE public.t (\n"
        "    id bigint NOT NULL,\n"
        # PostgreSQL 18 names a partition's inherited NOT NULL; 15 cannot: the name goes.
        "    slot smallint NOT NULL,\n"
        "    CONSTRAINT t_id_check CHECK ((id > 0))\n"
        ");\n"
        "\n"
        "ALTER TABLE ONLY public.t ALTER COLUMN id SET (n_distinct=-1);\n"
        "ALTER TABLE public.t ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (\n"
        "    SEQUENCE NAME public.t_id_seq\n"
        ");\n"
    )


def test_committed_schema_sql_matches_the_migrations(db_url: str) -> None:
    """The drift check: a migration added without `make db-dump` fails here."""
    committed = dump.schema_path().read_text(encoding="utf-8")
    fresh = dump.dump_schema(db_url)
    assert fresh == committed, (
        "src/jobyard/db/schema.sql is stale; run `make db-dump` and commit it.\n"
        + _diff(committed, fresh, ("schema.sql (committed)", "migrations at head"))
    )


def test_dumping_twice_gives_identical_text(db_url: str) -> None:
    # pg_dump 18 writes a random \restrict key into every dump; normalize must remove it.
    assert dump.dump_schema(db_url) == dump.dump_schema(db_url)


def _revisions() -> list[tuple[str, str | None]]:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("jobyard.db") / "migrations"))
    walk = ScriptDirectory.from_config(cfg).walk_revisions()  # head first
    return [(s.revision, s.down_revision) for s in walk]


def _create_empty(admin_url: str) -> str:
    name = testing.CLONE_PREFIX + uuid.uuid4().hex[:16]
    with connect_sync(admin_url) as admin:
        admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    return with_database(admin_url, name)


def _fresh_dump_at(admin_url: str, revision: str | None) -> str:
    """The schema of an empty database migrated straight up to `revision` (None: base)."""
    url = _create_empty(admin_url)
    try:
        migrate.upgrade(url, revision or "base")
        return dump.dump_schema(url)
    finally:
        testing.drop_database(admin_url, url)


def test_each_migration_downgrades_to_the_schema_before_it_and_back(
    db_url: str, pg_admin_url: str
) -> None:
    """Walking from head, every downgrade must restore exactly what its down_revision built,
    and upgrading again must reproduce the head schema."""
    at_head = dump.dump_schema(db_url)
    for revision, down in _revisions():
        migrate.downgrade(db_url, down or "base")
        assert migrate.current_revision(db_url) == down
        below = dump.dump_schema(db_url)
        expected = _fresh_dump_at(pg_admin_url, down)
        assert below == expected, f"downgrade of {revision} left:\n" + _diff(
            expected, below, (f"fresh database at {down or 'base'}", f"downgraded from {revision}")
        )
        migrate.upgrade(db_url)
        again = dump.dump_schema(db_url)
        assert again == at_head, f"re-upgrade through {revision} changed:\n" + _diff(
            at_head, again, ("head", f"head again after {revision}")
        )


def test_downgrade_to_base_leaves_nothing_behind(db_url: str) -> None:
    migrate.downgrade(db_url, "base")
    ddl = dump.normalize(dump.run_pg_dump(db_url))
    statements = [line for line in ddl.splitlines() if line.startswith(("CREATE", "ALTER"))]
    # Only Alembic's own bookkeeping table survives a full downgrade.
    assert statements == [
        "CREATE TABLE public.alembic_version (",
        "ALTER TABLE ONLY public.alembic_version",
    ], statements


def test_reset_schema_drops_everything_and_migrates_to_head(db_url: str) -> None:
    with connect_sync(db_url) as conn:
        conn.execute("INSERT INTO organizations (name, slug) VALUES ('Doomed', 'doomed')")
        conn.execute("CREATE TABLE stray_table (x int)")
    dump.reset_schema(db_url)
    assert migrate.is_at_head(db_url)
    with connect_sync(db_url) as conn:
        row = conn.execute("SELECT count(*) AS n FROM organizations").fetchone()
        assert row == {"n": 0}
        stray = conn.execute("SELECT to_regclass('public.stray_table') AS t").fetchone()
        assert stray == {"t": None}
    assert dump.dump_schema(db_url) == dump.schema_path().read_text(encoding="utf-8")


def test_reset_refuses_a_schema_locked_by_another_session(db_url: str) -> None:
    with connect_sync(db_url, autocommit=False) as holder:
        holder.execute("LOCK TABLE jobs IN ACCESS SHARE MODE")
        with pytest.raises(dump.SchemaResetError, match="other sessions hold locks"):
            dump.reset_schema(db_url, lock_timeout_s=0.2)
        holder.rollback()
    with connect_sync(db_url) as conn:
        assert conn.execute("SELECT to_regclass('public.jobs') AS t").fetchone() == {"t": "jobs"}


def test_cli_db_reset_without_yes_refuses_and_says_how_to_confirm(db_url: str) -> None:
    with connect_sync(db_url) as conn:
        conn.execute("INSERT INTO organizations (name, slug) VALUES ('Kept', 'kept')")
    result = CliRunner().invoke(app, ["db", "reset"], env={"JOBYARD_DATABASE_URL": db_url})
    assert result.exit_code == 2
    assert "jobyard db reset --yes" in _flat(result.output)
    with connect_sync(db_url) as conn:
        assert conn.execute("SELECT count(*) AS n FROM organizations").fetchone() == {"n": 1}


def test_cli_db_reset_with_yes_rebuilds_the_schema(db_url: str) -> None:
    with connect_sync(db_url) as conn:
        conn.execute("INSERT INTO organizations (name, slug) VALUES ('Gone', 'gone')")
    result = CliRunner().invoke(app, ["db", "reset", "--yes"], env={"JOBYARD_DATABASE_URL": db_url})
    assert result.exit_code == 0, result.output
    assert "schema re-created at revision" in _flat(result.output)
    with connect_sync(db_url) as conn:
        assert conn.execute("SELECT count(*) AS n FROM organizations").fetchone() == {"n": 0}


def test_cli_db_dump_check_passes_when_schema_sql_is_current(pg_admin_url: str) -> None:
    result = CliRunner().invoke(
        app, ["db", "dump", "--check"], env={"JOBYARD_DATABASE_URL": pg_admin_url}
    )
    assert result.exit_code == 0, result.output
    assert "up to date" in _flat(result.output)


def test_pg_dump_error_names_the_problem() -> None:
    bad = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2"
    with pytest.raises(dump.SchemaDumpError, match=r"^pg_dump failed: .*connection"):
        dump.run_pg_dump(bad)


def test_cli_db_dump_refuses_to_rewrite_an_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found as a user (2026-12-05): from a wheel, `jobyard db dump` would rewrite the
    schema.sql inside site-packages. Refused before any database is touched; --check is fine."""
    installed = tmp_path / "site-packages" / "jobyard" / "db" / "schema.sql"
    installed.parent.mkdir(parents=True)
    installed.write_text("-- as shipped\n", encoding="utf-8")
    monkeypatch.setattr(dump, "schema_path", lambda: installed)
    unreachable = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=1"
    result = CliRunner().invoke(app, ["db", "dump"], env={"JOBYARD_DATABASE_URL": unreachable})
    assert result.exit_code == 2, result.output
    assert "this jobyard is installed at" in _flat(result.output)
    assert "jobyard db dump --check" in _flat(result.output)
    assert installed.read_text(encoding="utf-8") == "-- as shipped\n"
    checkout = Path(__file__).resolve().parents[2] / "src" / "jobyard" / "db" / "schema.sql"
    assert dump.in_source_checkout(checkout) and not dump.in_source_checkout(installed)
