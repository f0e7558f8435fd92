"""Command-line entry points. Parses flags, builds Settings, calls into the packages."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from jobyard.core.cron import next_fires, parse_cron
from jobyard.db import dump, embedded, explain, migrate
from jobyard.db.pool import CONNECTION_ERRORS, connect_sync, resolve_database_url
from jobyard.db.seed import seed_demo
from jobyard.db.urls import display_url
from jobyard.domain.errors import ConfigurationError, JobyardError, ValidationFailed
from jobyard.domain.settings import Settings
from jobyard.logs import configure_logging
from jobyard.scheduler.runner import run_scheduler
from jobyard.supervisor import ChildSpec, supervise
from jobyard.worker.commands import enqueue_job, recent_jobs, start_worker

app = typer.Typer(
    name="jobyard",
    help="jobyard: background jobs, retries and cron on PostgreSQL alone.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Manage the database (embedded or DATABASE_URL).", no_args_is_help=True)
app.add_typer(db_app, name="db")
schedules_app = typer.Typer(help="Cron schedules: preview fire times.", no_args_is_help=True)
app.add_typer(schedules_app, name="schedules")

out = Console()
err = Console(stderr=True)


def fail(message: str, hint: str | None = None, code: int = 2) -> typer.Exit:
    """Print a one-line error (and how to fix it) and return the Exit to raise."""
    err.print(f"[bold red]error:[/] {message}")
    if hint:
        err.print(f"[dim]hint:[/] {hint}")
    return typer.Exit(code)


def load_settings(**overrides: object) -> Settings:
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "settings"
        raise fail(
            f"invalid configuration for {field}: {first['msg']}",
            "check the JOBYARD_* environment variables (see docs/CONFIGURATION.md)",
        ) from None
    configure_logging(settings.log_level, settings.log_format)
    return settings


DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="Where the embedded PostgreSQL keeps its data.")
]


# ----------------------------------------------------------------------------- database


@db_app.command("start")
def db_start(data_dir: DataDir = None) -> None:
    """Start the embedded PostgreSQL (created on first use) and print its URL."""
    settings = load_settings(data_dir=data_dir)
    if settings.database_url:
        out.print("DATABASE_URL is set; jobyard uses that server, nothing to start.")
        return
    with out.status("starting embedded PostgreSQL…"):
        url = embedded.start(settings.pgdata)
    out.print(f"embedded PostgreSQL running: {url}")


@db_app.command("stop")
def db_stop(data_dir: DataDir = None) -> None:
    """Stop the embedded PostgreSQL cleanly."""
    settings = load_settings(data_dir=data_dir)
    stopped = embedded.stop(settings.pgdata)
    out.print("stopped" if stopped else "not running")


@db_app.command("status")
def db_status(data_dir: DataDir = None) -> None:
    """Show whether the database is running and whether migrations are at head."""
    settings = load_settings(data_dir=data_dir)
    if settings.database_url:
        url = settings.database_url
        out.print(f"using DATABASE_URL: {display_url(url)}")
    else:
        status = embedded.status(settings.pgdata)
        out.print(f"embedded data directory: {status.pgdata}")
        if not status.running or status.url is None:
            out.print("embedded PostgreSQL: stopped (start it with `jobyard db start`)")
            raise typer.Exit(1)
        out.print(f"embedded PostgreSQL: running (pid {status.pid})")
        url = status.url
    try:
        current = migrate.current_revision(url)
    except Exception as exc:
        raise fail(f"cannot connect: {type(exc).__name__}", "is the server up?", 1) from None
    head = migrate.head_revision()
    state = "at head" if current == head else f"behind (run `jobyard migrate`; head is {head})"
    out.print(f"schema revision: {current or 'none'} — {state}")


@db_app.command("url")
def db_url(data_dir: DataDir = None) -> None:
    """Print the database URL (starting the embedded server if needed)."""
    settings = load_settings(data_dir=data_dir)
    print(resolve_database_url(settings))


@db_app.command("dump")
def db_dump(
    data_dir: DataDir = None,
    check: Annotated[
        bool, typer.Option("--check", help="Only compare; exit 1 if schema.sql is stale.")
    ] = False,
) -> None:
    """Rewrite src/jobyard/db/schema.sql from a freshly migrated throwaway database."""
    settings = load_settings(data_dir=data_dir)
    url = resolve_database_url(settings)
    target = dump.schema_path()
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
    settings = load_settings(data_dir=data_dir)
    url = resolve_database_url(settings)
    with out.status("EXPLAIN harness…") as status:

        def progress(message: str) -> None:
            status.update(message + "…")
            out.print(f"[dim]·[/] {message}")

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
    where = (
        display_url(settings.database_url)
        if settings.database_url
        else f"the embedded database in {settings.pgdata}"
    )
    if not yes:
        raise fail(
            f"db reset deletes every table and row in the public schema of {where}",
            "re-run as `jobyard db reset --yes` to confirm",
        )
    url = resolve_database_url(settings)
    try:
        with out.status("dropping the public schema and migrating…"):
            dump.reset_schema(url)
    except dump.SchemaResetError as exc:
        raise fail(exc.message, code=1) from None
    out.print(f"reset {where}: schema re-created at revision {migrate.head_revision()}")


@app.command("migrate")
def migrate_cmd(data_dir: DataDir = None) -> None:
    """Apply all migrations (idempotent: at head it does nothing)."""
    settings = load_settings(data_dir=data_dir)
    url = resolve_database_url(settings)
    before = migrate.current_revision(url)
    migrate.upgrade(url)
    after = migrate.current_revision(url)
    if before == after:
        out.print(f"schema already at head ({after})")
    else:
        out.print(f"migrated {before or 'empty'} → {after}")


@app.command("seed")
def seed_cmd(data_dir: DataDir = None) -> None:
    """Create the demo organization, operator login, project, queues and sample jobs."""
    settings = load_settings(data_dir=data_dir)
    url = resolve_database_url(settings)
    migrate.upgrade(url)
    with connect_sync(url, autocommit=True) as conn:
        result = seed_demo(conn)
    out.print(f"seeded project {result.project_id}; {result.jobs_added} sample jobs added")


# ----------------------------------------------------------------------------- processes

# Processes `up` and `demo` run as children. Each later process package adds its entry.
UP_CHILDREN: list[ChildSpec] = []
UP_CHILDREN.append(ChildSpec("scheduler", ["scheduler"]))


@app.command("scheduler")
def scheduler_cmd(data_dir: DataDir = None) -> None:
    """Run the cron materializer, promoter, lease reaper, dead-worker sweep and retention loops
    until SIGTERM/SIGINT (exit 0). Run as many replicas as you like: no leader is needed."""
    settings = load_settings(data_dir=data_dir)
    try:
        code = run_scheduler(settings)
    except ConfigurationError as exc:
        raise fail(exc.message, "check the JOBYARD_* scheduler settings") from None
    raise typer.Exit(code)


@schedules_app.command("preview")
def schedules_preview(
    expr: Annotated[str, typer.Argument(help='Cron expression, e.g. "0 9 * * 1-5".')],
    tz: Annotated[str, typer.Option("--tz", help="IANA timezone, e.g. Asia/Kolkata.")] = "UTC",
    n: Annotated[int, typer.Option("-n", min=1, max=100, help="How many fire times.")] = 5,
    seconds: Annotated[
        bool, typer.Option("--seconds", help="The expression has a leading seconds field.")
    ] = False,
    after: Annotated[
        str | None, typer.Option("--after", help="Start after this ISO time (default: now).")
    ] = None,
) -> None:
    """Print the next N fire times of a cron expression (local time and UTC)."""
    try:
        spec = parse_cron(expr, tz, seconds=True if seconds else None)
        start = _parse_after(after)
    except ValidationFailed as exc:
        raise fail(exc.message, "see docs/SCHEDULER.md for the cron syntax and DST rules") from None
    zone = spec.zone
    for fire in next_fires(spec, start, n):
        local = fire.astimezone(zone)
        out.print(
            f"{local:%Y-%m-%d %a %H:%M:%S} {local.tzname()} ({local:%z})"
            f"  =  {fire:%Y-%m-%dT%H:%M:%S}Z"
        )


def _parse_after(after: str | None) -> datetime:
    if after is None:
        return datetime.now(UTC)  # a preview only; the scheduler itself uses the database clock
    try:
        value = datetime.fromisoformat(after.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationFailed(f"--after: not an ISO 8601 time: {after!r}", field="after") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


# ----------------------------------------------------------------------------- api

UP_CHILDREN.append(ChildSpec("api", ["api"]))


@app.command("api")
def api_cmd(
    host: Annotated[str | None, typer.Option("--host", help="Interface to bind.")] = None,
    port: Annotated[
        int | None, typer.Option("--port", min=1, max=65535, help="TCP port to listen on.")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Serve the REST API (/api/v1, docs at /api/v1/docs) until SIGTERM/SIGINT."""
    from jobyard.api.server import run_api  # FastAPI loads only for this command

    settings = load_settings(data_dir=data_dir, api_host=host, api_port=port)
    url = resolve_database_url(settings)
    run_api(
        settings.model_copy(update={"database_url": url}),
        host=settings.api_host,
        port=settings.api_port,
    )


# ----------------------------------------------------------------------------- worker

UP_CHILDREN.append(
    ChildSpec(
        "worker",
        ["worker", "--queues", "default,critical,reports", "--app", "jobyard.worker.demo_app:app"],
    )
)
ProjectOpt = Annotated[
    str | None,
    typer.Option("--project", help="'org/project' or a project id (default: JOBYARD_PROJECT)."),
]


@app.command("worker")
def worker_cmd(
    queues: Annotated[
        str, typer.Option("--queues", "-q", help="Comma-separated queues (claimed by priority).")
    ] = "default",
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", min=1, max=1000, help="Handlers run at once."),
    ] = None,
    app_ref: Annotated[
        str | None,
        typer.Option("--app", help="Your tasks as 'module:app'; without it, built-ins only."),
    ] = None,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """Run jobs: wait (LISTEN + poll), claim, run handlers, heartbeat; drain on SIGTERM/SIGINT."""
    settings = load_settings(data_dir=data_dir)
    url = resolve_database_url(settings)
    try:
        code = start_worker(
            settings, url, queues=queues, concurrency=concurrency, app_ref=app_ref, project=project
        )
    except JobyardError as exc:
        raise fail(exc.message, "see docs/WORKER.md") from None
    except CONNECTION_ERRORS as exc:
        raise fail(f"cannot reach the database ({type(exc).__name__})", "is it running?") from None
    raise typer.Exit(code)


@app.command("enqueue")
def enqueue_cmd(
    handler: Annotated[str, typer.Argument(help="Handler name: noop, sleep, fail, http_request…")],
    queue: Annotated[str, typer.Option("--queue", "-q", help="Queue name.")] = "default",
    payload: Annotated[str, typer.Option("--payload", "-p", help="JSON payload.")] = "{}",
    delay: Annotated[
        str | None, typer.Option("--delay", help="Run later: 5s, 500ms, 2m, 1h.")
    ] = None,
    priority: Annotated[
        int, typer.Option("--priority", min=-1000, max=1000, help="Higher runs first.")
    ] = 0,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Enqueue at most once per key.")
    ] = None,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """Enqueue one job and print its id and status."""
    settings = load_settings(data_dir=data_dir)
    url = resolve_database_url(settings)
    try:
        job = enqueue_job(
            settings,
            url,
            handler=handler,
            queue=queue,
            payload=payload,
            delay=delay,
            priority=priority,
            idempotency_key=idempotency_key,
            project=project,
        )
    except JobyardError as exc:
        raise fail(exc.message) from None
    except CONNECTION_ERRORS as exc:
        raise fail(f"cannot reach the database ({type(exc).__name__})", "is it running?") from None
    note = "" if job.created else " (already enqueued with this idempotency key)"
    out.print(f"job {job.id} {job.status}{note}")


@app.command("jobs")
def jobs_cmd(
    status: Annotated[
        str | None, typer.Option("--status", "-s", help="e.g. queued, failed.")
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Queue name.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000)] = 20,
    project: ProjectOpt = None,
    data_dir: DataDir = None,
) -> None:
    """List the newest jobs (id, queue, handler, status, attempt, run_at, last_error)."""
    settings = load_settings(data_dir=data_dir)
    url = resolve_database_url(settings)
    try:
        rows = recent_jobs(settings, url, status=status, queue=queue, limit=limit, project=project)
    except JobyardError as exc:
        raise fail(exc.message) from None
    except CONNECTION_ERRORS as exc:
        raise fail(f"cannot reach the database ({type(exc).__name__})", "is it running?") from None
    table = Table("id", "queue", "handler", "status", "attempt", "run_at", "last_error")
    for row in rows:
        error = row["last_error"] or ""
        table.add_row(
            str(row["id"]),
            row["queue"],
            row["handler"],
            row["status"],
            f"{row['attempt']}/{row['max_attempts']}",
            f"{row['run_at']:%Y-%m-%d %H:%M:%S}",
            error if len(error) <= 60 else error[:59] + "…",
        )
    out.print(table)


@app.command("up")
def up_cmd(data_dir: DataDir = None) -> None:
    """Run every jobyard process (api, worker, scheduler) as children until Ctrl-C."""
    settings = load_settings(data_dir=data_dir)
    url = resolve_database_url(settings)
    migrate.upgrade(url)
    raise typer.Exit(_run_children(url))


def _run_children(url: str) -> int:
    if not UP_CHILDREN:
        out.print("database ready; no other processes to run yet. Ctrl-C to stop.")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0
    return supervise(UP_CHILDREN, env={"JOBYARD_DATABASE_URL": url})


@app.command("demo")
def demo_cmd(data_dir: DataDir = None) -> None:
    """Start the embedded database, migrate, seed demo data and run the whole system."""
    settings = load_settings(data_dir=data_dir)
    with out.status("starting database…"):
        url = resolve_database_url(settings)
    with out.status("migrating…"):
        migrate.upgrade(url)
    with out.status("seeding demo data…"), connect_sync(url, autocommit=True) as conn:
        result = seed_demo(conn)
    out.rule("jobyard demo")
    out.print(f"database   {display_url(url)}")
    out.print(f"dashboard  http://{settings.api_host}:{settings.api_port}/")
    out.print(f"API docs   http://{settings.api_host}:{settings.api_port}/api/v1/docs")
    out.print(f"login      {result.user_email} / {result.user_password}")
    out.print(
        f"seeded     project {result.project_id}, queues {', '.join(result.queues)}, "
        f"{result.jobs_added} new sample jobs"
    )
    out.rule()
    raise typer.Exit(_run_children(url))


# ----------------------------------------------------------------------------- bench


@app.command("bench")
def bench_cmd(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object of the key numbers only.")
    ] = False,
    quick: Annotated[
        bool, typer.Option("--quick", help="Tiny sizes (a smoke run); writes no report.")
    ] = False,
    runs: Annotated[
        int | None, typer.Option("--runs", min=1, max=10, help="Repeat; report medians.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Report file (default docs/BENCHMARKS.md; none if --quick)."),
    ] = None,
    reference_file: Annotated[
        Path | None,
        typer.Option(
            "--reference",
            help="PgQueuer's numbers measured on this machine by `make bench-peers` "
            "(.jobyard/peers/pgqueuer.json) for the PgQueuer column and ratios; "
            "default: the figures quoted in the issue.",
        ),
    ] = None,
    peer_command: Annotated[
        str | None,
        typer.Option(
            "--peer-command",
            help="Run this peer benchmark (it prints one JSON object like `make bench-peers` "
            "writes) once before each of jobyard's runs, and compare against the median of its "
            "runs: both meet the same load of a shared host. `make bench` passes "
            "'benchmarks/peers/pgqueuer/run.sh --runs 1'.",
        ),
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Benchmark enqueue, drain (1 and 2 worker processes) and pickup latency."""
    from jobyard.benchmarks import harness, reference, report  # loads only for this command

    settings = load_settings(data_dir=data_dir)
    # Checked before minutes of benchmarking, not after.
    peer = reference.QUOTED
    interleaved: reference.PeerCommand | None = None
    try:
        if reference_file is not None and peer_command is not None:
            raise reference.ReferenceFileError(
                "--reference and --peer-command both name the PgQueuer column",
                "use one: --peer-command measures it now, --reference reads an earlier result",
            )
        if reference_file is not None:
            peer = reference.load(reference_file)
        if peer_command is not None:
            interleaved = reference.PeerCommand(peer_command)
    except reference.ReferenceFileError as exc:
        raise fail(exc.message, exc.hint) from None
    before_run = interleaved.run_once if interleaved is not None else None
    # A dedicated embedded server with PostgreSQL's durable defaults, apart from the demo's.
    admin_url = settings.database_url or embedded.start(settings.data_dir / "bench-pgdata")
    sizes = harness.QUICK if quick else harness.FULL
    target = output if output is not None or quick else Path("docs/BENCHMARKS.md")
    try:
        if as_json:
            result = harness.run_bench(admin_url, sizes, runs or 1, lambda _: None, before_run)
        else:
            with err.status("benchmarking…") as status:

                def progress(message: str) -> None:
                    status.update(message + "…")
                    err.print(f"[dim]·[/] {message}")

                result = harness.run_bench(
                    admin_url, sizes, runs or (1 if quick else 3), progress, before_run
                )
        if interleaved is not None:
            peer = interleaved.reference()
    except reference.ReferenceFileError as exc:
        raise fail(exc.message, exc.hint) from None
    except JobyardError as exc:
        raise fail(exc.message) from None
    except CONNECTION_ERRORS as exc:
        raise fail(f"cannot reach the database ({type(exc).__name__})", "is it running?") from None
    if target is not None:
        report.write_report(result, target, peer)
    if as_json:
        print(json.dumps(result.json_object()))
        return
    err.print(report.summary_table(result, peer))
    err.print(f"{peer.label} column: {peer.source}")
    if target is not None:
        err.print(f"wrote {target}")


@app.command("bench-dashboard")
def bench_dashboard_cmd(
    quick: Annotated[
        bool, typer.Option("--quick", help="20,000 jobs instead of 1,000,000 (a smoke run).")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Also write the markdown table to this file."),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the database afterwards (prints its URL).")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Time every dashboard page and list/aggregate API at 1,000,000 jobs (p50/p95 of 20)."""
    from jobyard.benchmarks import dashboard  # loads only for this command

    settings = load_settings(data_dir=data_dir)
    admin_url = settings.database_url or embedded.start(settings.data_dir / "bench-pgdata")
    size = dashboard.QUICK if quick else dashboard.FULL
    try:
        with err.status("building the data set…") as status:

            def progress(message: str) -> None:
                status.update(message + "…")
                err.print(f"[dim]·[/] {message}")

            result = dashboard.run_dashboard_bench(admin_url, size, progress, keep=keep)
    except (JobyardError, RuntimeError, ValueError) as exc:
        raise fail(str(exc)) from None
    except CONNECTION_ERRORS as exc:
        raise fail(f"cannot reach the database ({type(exc).__name__})", "is it running?") from None
    table = dashboard.markdown(result)
    print(table)
    if output is not None:
        output.write_text(table, encoding="utf-8")
        err.print(f"wrote {output}")
    slow = [t.name for t in result.timings if not t.ok]
    if slow:
        raise fail(f"over {dashboard.BUDGET_MS:.0f} ms at p95 (or not 200): {', '.join(slow)}")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
