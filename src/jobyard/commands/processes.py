"""The long-running commands: `worker`, `scheduler`, `api`, `up`, `demo`.

Each says once which database it uses (password hidden) and, while the server refuses or does
not answer, waits for it with backoff saying what it waits for.
"""

from __future__ import annotations

import errno
import socket
import time
from typing import Annotated

import typer

from jobyard.commands.common import (
    ANNOUNCED_ENV,
    DataDir,
    ProjectOpt,
    clear_errors,
    fail,
    load_settings,
    open_database,
    out,
)
from jobyard.commands.guide_files import see
from jobyard.db.pool import connect_sync
from jobyard.db.seed import login_line, seed_demo
from jobyard.domain.settings import Settings
from jobyard.scheduler.runner import run_scheduler
from jobyard.supervisor import ChildSpec, supervise
from jobyard.worker.commands import start_worker

root = typer.Typer()

# Processes `up` and `demo` run as children.
UP_CHILDREN: list[ChildSpec] = [
    ChildSpec("scheduler", ["scheduler"]),
    ChildSpec("api", ["api"]),
    ChildSpec(
        "worker",
        ["worker", "--queues", "default,critical,reports", "--app", "jobyard.worker.demo_app:app"],
    ),
]

HostOpt = Annotated[
    str | None, typer.Option("--host", help="Interface to bind (default: JOBYARD_API_HOST).")
]
PortOpt = Annotated[
    int | None,
    typer.Option("--port", min=1, max=65535, help="TCP port (default: JOBYARD_API_PORT, 8000)."),
]


@root.command("scheduler")
def scheduler_cmd(data_dir: DataDir = None) -> None:
    """Run the cron, promoter, lease reaper, dead-worker sweep and retention loops.

    Runs until SIGTERM/SIGINT (exit 0). Run as many replicas as you like: no leader is needed.
    """
    settings = load_settings(data_dir=data_dir)
    url = open_database(settings, announce=True, wait=True).url
    with clear_errors("check the JOBYARD_* scheduler settings"):
        code = run_scheduler(settings.model_copy(update={"database_url": url}))
    raise typer.Exit(code)


@root.command("api")
def api_cmd(host: HostOpt = None, port: PortOpt = None, data_dir: DataDir = None) -> None:
    """Serve the REST API (/api/v1, docs at /api/v1/docs) and the dashboard until SIGTERM/SIGINT."""
    from jobyard.api.server import run_api  # FastAPI loads only for this command

    settings = load_settings(data_dir=data_dir, api_host=host, api_port=port)
    _require_free_port(settings.api_host, settings.api_port, "jobyard api")
    url = open_database(settings, announce=True, wait=True).url
    with clear_errors(see("CONFIGURATION")):
        run_api(
            settings.model_copy(update={"database_url": url}),
            host=settings.api_host,
            port=settings.api_port,
        )


@root.command("worker")
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
    url = open_database(settings, announce=True, wait=True).url
    with clear_errors(see("WORKER")):
        code = start_worker(
            settings, url, queues=queues, concurrency=concurrency, app_ref=app_ref, project=project
        )
    raise typer.Exit(code)


@root.command("up")
def up_cmd(host: HostOpt = None, port: PortOpt = None, data_dir: DataDir = None) -> None:
    """Run every jobyard process (api, worker, scheduler) as children until Ctrl-C."""
    settings = load_settings(data_dir=data_dir, api_host=host, api_port=port)
    _require_free_port(settings.api_host, settings.api_port, "jobyard up")
    url = open_database(settings, announce=True, wait=True).url
    raise typer.Exit(_run_children(url, settings))


@root.command("demo")
def demo_cmd(host: HostOpt = None, port: PortOpt = None, data_dir: DataDir = None) -> None:
    """Start the embedded database, migrate, seed demo data and run the whole system."""
    settings = load_settings(data_dir=data_dir, api_host=host, api_port=port)
    # Checked before anything is printed: a demo that prints a login and then dies is worse
    # than one line saying the port is taken.
    _require_free_port(settings.api_host, settings.api_port, "jobyard demo")
    with out.status("starting the database…"):
        resolved = open_database(settings)
    url = resolved.url
    with out.status("seeding demo data…"), clear_errors(), connect_sync(url) as conn:
        result = seed_demo(conn)
    base = f"http://{settings.api_host}:{settings.api_port}"
    out.rule("jobyard demo")
    out.print(f"database   {resolved.describe()}", highlight=False)
    out.print(f"dashboard  {base}/", highlight=False)
    out.print(f"API docs   {base}/api/v1/docs", highlight=False)
    out.print(f"login      {login_line(result)}", highlight=False)
    out.print(
        f"seeded     project {result.project_id}, queues {', '.join(result.queues)}, "
        f"{result.jobs_added} new sample jobs",
        highlight=False,
    )
    # No mail server: the API writes each invitation link in an "invitation link" log line.
    out.print("invites    links appear below as 'invitation link' log lines (no mail server)")
    out.rule()
    raise typer.Exit(_run_children(url, settings))


def _run_children(url: str, settings: Settings) -> int:
    if not UP_CHILDREN:  # pragma: no cover - kept for a build without process packages
        out.print("database ready; no other processes to run yet. Ctrl-C to stop.")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0
    env = {
        "JOBYARD_DATABASE_URL": url,
        "JOBYARD_API_HOST": settings.api_host,
        "JOBYARD_API_PORT": str(settings.api_port),
        ANNOUNCED_ENV: "1",
    }
    return supervise(UP_CHILDREN, env=env)


def _require_free_port(host: str, port: int, command: str) -> None:
    """Fail in one line, before anything starts, when host:port cannot be bound."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        # The host is the problem, not the port: a name that does not resolve, or an address
        # that is not this machine's.
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            reason = (
                "does not resolve" if isinstance(exc, socket.gaierror) else "is not this machine's"
            )
            raise fail(
                f"cannot listen on {host}: the address {reason} ({exc.strerror})",
                f"listen on one of this machine's addresses: `{command} --host 127.0.0.1` "
                "(or 0.0.0.0 for all; or set JOBYARD_API_HOST)",
            ) from None
        if exc.errno == errno.EADDRINUSE:
            why = "is already in use (another jobyard or web server?)"
        elif exc.errno == errno.EACCES:
            why = "needs privileges to bind"
        else:
            why = f"cannot be bound ({exc.strerror})"
        other = 8001 if port != 8001 else 8002
        raise fail(
            f"port {port} on {host} {why}",
            f"choose another: `{command} --port {other}` (or set JOBYARD_API_PORT)",
        ) from None
