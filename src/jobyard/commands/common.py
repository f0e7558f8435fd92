"""What every command shares: consoles, the one-line error, settings, and opening the database.

Every command reaches the database through `open_database`, so each applies the same rule
(db/locate.py), the same checks (db/resolve.py) and prints the same one-line errors.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Final, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from typer.core import TyperOption

from jobyard.commands.guide_files import see
from jobyard.db import diagnose
from jobyard.db.locate import locate
from jobyard.db.pool import CONNECTION_ERRORS, Conn, connect
from jobyard.db.resolve import Resolved, resolve
from jobyard.domain.errors import ConfigurationError, DatabaseUnavailable, JobyardError
from jobyard.domain.settings import Settings
from jobyard.logs import configure_logging

T = TypeVar("T")

# What the database holds (handler and worker names, payloads, errors) is printed as it is:
# markup off, so a "[/]" in a name is text, not a tag that ends the program (rich's
# MarkupError). A line that styles asks for markup=True and escapes what it interpolates.
out = Console(soft_wrap=True, markup=False)
err = Console(stderr=True, soft_wrap=True)

# `jobyard up` / `demo` set this for their children: the parent already said which database.
ANNOUNCED_ENV: Final = "JOBYARD_DATABASE_ANNOUNCED"
WAIT_FIRST_S: Final = 0.5
WAIT_CAP_S: Final = 5.0

DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Where the embedded PostgreSQL keeps its data "
        "(default: the project's .jobyard/, found upward from here).",
    ),
]
ProjectOpt = Annotated[
    str | None,
    typer.Option("--project", help="'org/project' or a project id (default: JOBYARD_PROJECT)."),
]


def typer_app(help_text: str, **kwargs: Any) -> typer.Typer:
    """A sub-command group with the CLI's common options."""
    return typer.Typer(
        help=help_text,
        no_args_is_help=kwargs.pop("no_args_is_help", True),
        add_completion=False,
        pretty_exceptions_enable=False,
        **kwargs,
    )


def fail(message: str, hint: str | None = None, code: int = 2) -> typer.Exit:
    """Print a one-line error (and how to fix it) and return the Exit to raise."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    if hint:
        err.print(f"[dim]hint:[/] {escape(hint)}", highlight=False)
    return typer.Exit(code)


def exit_code(exc: JobyardError) -> int:
    """2 for what the user typed or configured; 1 for a database that cannot be used."""
    return 1 if isinstance(exc, DatabaseUnavailable) else 2


@contextmanager
def clear_errors(hint: str | None = None) -> Iterator[None]:
    """Any jobyard error inside becomes one line and a non-zero exit, never a traceback."""
    try:
        yield
    except JobyardError as exc:
        raise fail(exc.message, hint, exit_code(exc)) from None
    except CONNECTION_ERRORS as exc:
        # The server went away after the checks passed (restart, network): say so plainly.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise fail(f"lost the database connection: {first}", "is the server up?", 1) from None


def load_settings(**overrides: object) -> Settings:
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "settings"
        raise fail(
            f"invalid configuration for {field}: {first['msg']}",
            "check the JOBYARD_* environment variables and [tool.jobyard] in pyproject.toml "
            f"({see('CONFIGURATION')})",
        ) from None
    except ConfigurationError as exc:
        raise fail(exc.message, see("CONFIGURATION")) from None
    if "log_format" not in settings.model_fields_set and err.is_terminal:
        # A person at a terminal reads lines, not JSON; set JOBYARD_LOG_FORMAT to choose.
        settings = settings.model_copy(update={"log_format": "console"})
    configure_logging(settings.log_level, settings.log_format)
    return settings


def open_database(
    settings: Settings,
    *,
    announce: bool = False,
    wait: bool = False,
    check_schema: bool = True,
) -> Resolved:
    """The database of the rule, checked; errors become one line and a non-zero exit.

    announce: print once which database is used (long-running commands).
    wait: while the server refuses or does not answer, say so and retry with backoff
    (a worker started before its database); other errors stop at once.
    """
    with clear_errors():
        where = locate(settings)
        if announce and not os.environ.get(ANNOUNCED_ENV):
            err.print(f"database: {where.describe()}", highlight=False, soft_wrap=True)
        if where.url is not None:
            source = where.reason.removeprefix("from ")
            if wait:
                wait_for_server(where.url, source)
            else:
                diagnose.probe(where.url, source)
        return resolve(settings, check_schema=check_schema)


def wait_for_server(url: str, source: str, *, sleep: Callable[[float], None] = time.sleep) -> None:
    """Probe until the server answers; a permanent error (bad URL, auth, no database) raises."""
    delay = WAIT_FIRST_S
    attempts = 0
    while True:
        try:
            diagnose.probe(url, source)
        except DatabaseUnavailable as exc:
            if not diagnose.is_transient(exc):
                raise
            attempts += 1
            err.print(
                f"waiting for the database: {exc.message} — retrying in {delay:g} s "
                f"(attempt {attempts}; Ctrl-C to stop)",
                highlight=False,
                soft_wrap=True,
            )
            sleep(delay)
            delay = min(WAIT_CAP_S, delay * 2)
            continue
        if attempts:
            err.print("database reachable; starting", highlight=False)
        return


def run_with_conn(url: str, work: Callable[[Conn], Awaitable[T]]) -> T:
    """Run `work` on one autocommit connection in a fresh event loop (short commands)."""

    async def main() -> T:
        conn = await connect(url, autocommit=True, application_name="jobyard-cli")
        try:
            return await work(conn)
        finally:
            await conn.close()

    with clear_errors():
        return asyncio.run(main())


# Typer (0.28+) prints a type next to every option; for an on/off flag that reads "<bool>" and
# says nothing (issue 11). Flags show no type; valued options keep theirs. Older Typer has no such
# column, and nothing to patch.
_display_type_rich: Callable[[TyperOption, Any], str | None] | None = getattr(
    TyperOption, "display_type_rich", None
)


def _flag_without_type(self: TyperOption, ctx: Any) -> str | None:
    if self.is_flag or _display_type_rich is None:
        return None
    return _display_type_rich(self, ctx)


if _display_type_rich is not None:
    setattr(TyperOption, "display_type_rich", _flag_without_type)  # noqa: B010 - mypy: no method-assign
