"""`jobyard db start|stop|status|health|url|dump|explain|reset`, `jobyard migrate`, `seed`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from jobyard.commands.common import (
    DataDir,
    clear_errors,
    fail,
    load_settings,
    open_database,
    out,
    run_with_conn,
    typer_app,
)
from jobyard.core import db_health
from jobyard.db import diagnose, dump, embedded, explain, migrate
from jobyard.db.locate import locate
from jobyard.db.pool import Conn, connect_sync
from jobyard.db.resolve import head_revision, schema_revision
from jobyard.db.seed import login_line, seed_demo

db_app = typer_app("Manage the database (embedded or JOBYARD_DATABASE_URL).")
root = typer.Typer()  # commands that sit at the top level: `jobyard migrate`, `jobyard seed`


@db_app.command("start")
def db_start(data_dir: DataDir = None) -> None:
    """Start the embedded PostgreSQL (created on first use) and print its URL."""
    where = locate(load_settings(data_dir=data_dir))
    if where.url is not None:
        out.print(f"a server is configured ({where.describe()}); nothing to start.")
        return
    with out.status("starting embedded PostgreSQL…"), clear_errors():
        url = embedded.start(where.pgdata)
    out.print(f"embedded PostgreSQL running: {url}")


@db_app.command("stop")
def db_stop(data_dir: DataDir = None) -> None:
    """Stop the embedded PostgreSQL cleanly."""
    where = locate(load_settings(data_dir=data_dir))
    stopped = embedded.stop(where.pgdata)
    out.print("stopped" if stopped else "not running")


@db_app.command("status")
def db_status(data_dir: DataDir = None) -> None:
    """Say which database the rule finds from here, whether it runs and its schema revision."""
    where = locate(load_settings(data_dir=data_dir))
    out.print(f"database: {where.describe()}", highlight=False, soft_wrap=True)
    if where.url is None:
        status = embedded.status(where.pgdata)
        if not status.running or status.url is None:
            out.print("embedded PostgreSQL: stopped (start it with `jobyard db start`)")
            raise typer.Exit(1)
        out.print(f"embedded PostgreSQL: running (pid {status.pid})")
        url, source = status.url, "the embedded server"
    else:
        url, source = where.url, where.reason.removeprefix("from ")
    with clear_errors():
        diagnose.probe(url, source)
        current = schema_revision(url, source)
    head = head_revision()
    state = "at head" if current == head else f"behind (run `jobyard migrate`; head is {head})"
    out.print(f"schema revision: {current or 'none'} — {state}")


@db_app.command("health")
def db_health_cmd(data_dir: DataDir = None) -> None:
    """Who holds the xmin horizon back and how dead the busiest tables are, with the dashboard's
    warnings; exits 1 when there is a warning (thresholds: JOBYARD_HEALTH_*)."""
    settings = load_settings(data_dir=data_dir)
    url = open_database(settings).url

    async def work(conn: Conn) -> db_health.DbHealth:
        return await db_health.read(
            conn,
            xmin_warn_s=settings.health_xmin_warn_s,
            dead_ratio_warn=settings.health_dead_ratio_warn,
        )

    health = run_with_conn(url, work)
    if not health.xmin_holders:
        out.print("xmin horizon: nobody holds it back")
    else:
        out.print(
            f"xmin horizon: held back by {len(health.xmin_holders)} "
            f"(warn past {_duration(health.xmin_warn_s)}; the first is the one vacuum waits for)"
        )
        holders = Table("held by", "pid", "database", "application", "state", "age", "xids behind")
        for h in health.xmin_holders:
            holders.add_row(
                str(h["held_by"]),
                "-" if h["pid"] is None else str(h["pid"]),
                h["database"] or "-",
                h["application_name"] or "-",
                h["state"] or "-",
                "-" if h["since"] is None else _duration(float(h["age_s"])),
                f"{h['xmin_age_xids']:,}",
            )
        out.print(holders)
    tables = Table("table", "live", "dead", "dead ratio", "last vacuum", "warn")
    for r in health.relations:
        tables.add_row(
            str(r["relation"]),
            f"{r['live']:,}",
            f"{r['dead']:,}",
            f"{float(r['dead_ratio']):.1%}",
            "never" if r["last_vacuum"] is None else f"{r['last_vacuum']:%Y-%m-%d %H:%M:%S}",
            "yes" if health.relation_warning(r) else "",
        )
    out.print(tables)
    for warning in health.warnings:
        out.print(f"warning: {warning}", highlight=False, soft_wrap=True)
    if health.warnings:
        raise typer.Exit(1)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@db_app.command("url")
def db_url(data_dir: DataDir = None) -> None:
    """Print the database URL (starting and migrating the embedded server if needed)."""
    print(open_database(load_settings(data_dir=data_dir)).url)


@db_app.command("dump")
def db_dump(
    data_dir: DataDir = None,
    check: Annotated[
        bool, typer.Option("--check", help="Only compare; exit 1 if schema.sql is stale.")
    ] = False,
) -> None:
    """Rewrite src/jobyard/db/schema.sql from a freshly migrated throwaway database (in a
    jobyard source checkout; --check anywhere)."""
    target = dump.schema_path()
    if not check and not dump.in_source_checkout(target):
        # An installed package's copy: rewriting it would change the installed jobyard.
        raise fail(
            f"`jobyard db dump` rewrites the schema.sql of a jobyard source checkout, and this "
            f"jobyard is installed at {target.parent}",
            "compare only with `jobyard db dump --check`, or run it in a checkout (`make db-dump`)",
        )
    url = open_database(load_settings(data_dir=data_dir), check_schema=False).url
    try:
        with out.status("migrating a throwaway database and dumping its schema…"):
            text = dump.dump_fresh(url)
    except dump.SchemaDumpError as exc:
        raise fail(exc.message, "is the server up, and PostgreSQL 15 or newer?", 1) from None
    current = target.read_text(encoding="utf-8") if target.exists() else None
    if current == text:
        out.print(f"{target} is up to date")
        return
    if check:
        raise fail(f"{target} differs from the migrations", "run `make db-dump` and commit it", 1)
    target.write_text(text, encoding="utf-8")
    out.print(f"wrote {target}")


@db_app.command("explain")
def db_explain(
    data_dir: DataDir = None,
    rows: Annotated[int, typer.Option(min=100, help="Rows in the jobs table.")] = (
        explain.DEFAULT_ROWS
    ),
    runs: Annotated[int, typer.Option(min=1, help="Measured runs per plan (median).")] = (
        explain.DEFAULT_RUNS
    ),
    output: Annotated[Path, typer.Option(help="Where to write the report.")] = Path(
        "docs/EXPLAIN.md"
    ),
) -> None:
    """Measure the claim and every hinted named query with EXPLAIN ANALYZE → docs/EXPLAIN.md."""
    url = open_database(load_settings(data_dir=data_dir), check_schema=False).url
    with out.status("EXPLAIN harness…") as status:

        def progress(message: str) -> None:
            status.update(message + "…")
            out.print(f"[dim]·[/] {escape(message)}", markup=True)

        try:
            report = explain.run_explain(url, rows=rows, runs=runs, progress=progress)
        except explain.ExplainError as exc:
            raise fail(exc.message, "see the `-- explain:` hints in docs/DATABASE.md") from None
    explain.write_report(report, output)
    for line in explain.summary_lines(report):
        out.print(line)
    out.print(f"wrote {output}")


@db_app.command("reset")
def db_reset(
    data_dir: DataDir = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm: every table and row in the schema is lost.")
    ] = False,
) -> None:
    """Drop and re-create the public schema of the configured database, then migrate."""
    settings = load_settings(data_dir=data_dir)
    where = locate(settings).describe()
    if not yes:
        raise fail(
            f"db reset deletes every table and row in the public schema of {where}",
            "re-run as `jobyard db reset --yes` to confirm",
        )
    url = open_database(settings, check_schema=False).url
    try:
        with out.status("dropping the public schema and migrating…"):
            dump.reset_schema(url)
    except dump.SchemaResetError as exc:
        raise fail(exc.message, code=1) from None
    out.print(f"reset {where}: schema re-created at revision {head_revision()}")


@root.command("migrate")
def migrate_cmd(data_dir: DataDir = None) -> None:
    """Apply all migrations (idempotent: at head it does nothing)."""
    resolved = open_database(load_settings(data_dir=data_dir), check_schema=False)
    url = resolved.url
    with clear_errors():
        before = schema_revision(url)
        migrate.upgrade(url)
        after = schema_revision(url)
    if before == after:
        out.print(
            f"schema already at head ({after}): {resolved.describe()}",
            highlight=False,
            soft_wrap=True,
        )
    else:
        out.print(f"migrated {before or 'empty'} → {after}: {resolved.describe()}", highlight=False)


@root.command("seed")
def seed_cmd(data_dir: DataDir = None) -> None:
    """Create the demo organization, operator login, project, queues and sample jobs. Not
    with JOBYARD_ENV=prod: the demo login's password is published."""
    settings = load_settings(data_dir=data_dir)
    if settings.env == "prod":
        raise fail(
            "`jobyard seed` makes a demo login whose password is published; not with "
            "JOBYARD_ENV=prod",
            "make your own login: jobyard accounts create-owner EMAIL --org SLUG",
        )
    url = open_database(settings).url
    with clear_errors(), connect_sync(url, autocommit=True) as conn:
        result = seed_demo(conn)
    out.print(f"seeded project {result.project_id}; {result.jobs_added} sample jobs added")
    out.print(f"login: {login_line(result)}", highlight=False)
