"""Bad input from the command line is one line naming the fix and exit 2, never a traceback,
and changes nothing: project slugs and queue names by the database's rules, a malformed database
URL, cron previews at the ends of the calendar, unknown projects and jobs; and `jobs --help`
names every subcommand."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from jobyard.cli import app
from jobyard.commands import common
from jobyard.commands.guide_files import see
from jobyard.core import projects
from jobyard.db.pool import Conn
from jobyard.db.resolve import forget_checks
from jobyard.domain.ids import ProjectId
from tests.worker.helpers import PROJECT, rows

SLUG_RULE = "use lowercase letters, digits and '-'"
QUEUE_RULE = "use letters, digits and '_', '.', ':', '-'"
UNKNOWN_JOB = "error: job 999999 does not exist in this project; `jobyard jobs` lists the newest"


@pytest.fixture
def cli(db_url: str, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setattr(common.out, "width", 300)
    return CliRunner(
        env={"JOBYARD_DATABASE_URL": db_url, "JOBYARD_PROJECT": PROJECT, "COLUMNS": "300"}
    )


async def invoke(cli: CliRunner, args: list[str], env: dict[str, str] | None = None) -> Result:
    """The CLI runs its own event loop (asyncio.run), so it runs in a thread beside the test's."""
    return await asyncio.to_thread(cli.invoke, app, args, env=env)


def refused(result: Result) -> list[str]:
    """The lines of a refusal: exit 2, no traceback."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result.output.strip().splitlines()


async def _project(conn: Conn) -> ProjectId:
    pid = await projects.resolve_project(conn, PROJECT, create=True)
    await projects.ensure_queues(conn, pid, ["default"])
    return pid


async def _names(conn: Conn) -> tuple[list[object], list[object], list[object]]:
    orgs = await rows(conn, "SELECT slug FROM organizations ORDER BY id")
    projs = await rows(conn, "SELECT slug FROM projects ORDER BY id")
    queues = await rows(conn, "SELECT name FROM queues ORDER BY id")
    return orgs, projs, queues


# ------------------------------------------------------------------ 1. project slugs


@pytest.mark.parametrize(
    ("ref", "what", "shown"),
    [
        ("Bad Org/x y", "organization", "'Bad Org'"),
        ("a/b/c", "project", "'b/c'"),
        ("ACME/shop", "organization", "'ACME'"),
        ("a" * 100 + "/x", "organization", "(100 characters)"),
        ("acme/" + "p" * 64, "project", "(64 characters)"),
        ("acme/-shop", "project", "'-shop'"),
    ],
)
async def test_enqueue_with_a_bad_project_slug_is_one_line_and_creates_nothing(
    cli: CliRunner, conn: Conn, ref: str, what: str, shown: str
) -> None:
    before = await _names(conn)
    lines = refused(await invoke(cli, ["enqueue", "noop", "--project", ref, "--create-queue"]))
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: project ") and f": the {what} slug " in lines[0], lines
    assert shown in lines[0] and SLUG_RULE in lines[0] and "at most 63 characters" in lines[0]
    assert await _names(conn) == before  # not even the organization of a bad project slug


def _worker(db_url: str, tmp_path: Path, *args: str, project: str = PROJECT) -> list[str]:
    """`jobyard worker` in a process of its own (a worker run in the test's process would
    change its collector and event loop); the lines it printed, after checking it refused."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBYARD_")}
    env |= {"JOBYARD_DATABASE_URL": db_url, "JOBYARD_PROJECT": project, "COLUMNS": "300"}
    done = subprocess.run(
        [sys.executable, "-m", "jobyard", "worker", *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output
    return output.strip().splitlines()


async def test_a_worker_in_a_project_with_a_bad_slug_stops_with_one_line(
    db_url: str, conn: Conn, tmp_path: Path
) -> None:
    before = await _names(conn)
    lines = await asyncio.to_thread(_worker, db_url, tmp_path, project="Bad Org/x")
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, lines
    assert errors[0].startswith(
        "error: project 'Bad Org/x': the organization slug 'Bad Org' is invalid"
    ), errors
    assert SLUG_RULE in errors[0]
    assert await _names(conn) == before


# ------------------------------------------------------------------ 2. queue names


@pytest.mark.parametrize(("queues", "shown"), [("a b", "'a b'"), ("ok," + "q" * 150, "(150 ")])
async def test_a_worker_with_a_bad_queue_name_stops_with_one_line(
    db_url: str, conn: Conn, tmp_path: Path, queues: str, shown: str
) -> None:
    await _project(conn)
    before = await _names(conn)
    lines = await asyncio.to_thread(_worker, db_url, tmp_path, "--queues", queues)
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, lines
    assert errors[0].startswith("error: queue name ") and shown in errors[0], lines
    assert QUEUE_RULE in errors[0] and "at most 100 characters" in errors[0]
    assert await _names(conn) == before


# ------------------------------------------------------------------ 3. a malformed URL


@pytest.mark.parametrize(
    "url",
    ["postgresql://postgres@[::1:5432/x", "postgresql://postgres:s3cret@[::1:5432/x"],
)
def test_a_malformed_database_url_is_one_line_naming_the_setting_and_the_form(url: str) -> None:
    forget_checks()
    result = CliRunner().invoke(app, ["jobs"], env={"JOBYARD_DATABASE_URL": url, "COLUMNS": "300"})
    lines = refused(result)
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: JOBYARD_DATABASE_URL is not a valid URL (Invalid IPv6 URL)")
    assert "use postgresql://user:password@host:5432/database" in lines[0]
    assert "s3cret" not in result.output


# ------------------------------------------------------------------ 4. cron at the calendar's ends


def test_preview_at_the_end_of_the_calendar_stops_there() -> None:
    after = ["--after", "9999-12-31T23:00:00Z", "-n", "3"]
    result = CliRunner().invoke(app, ["schedules", "preview", "0 9 * * 1-5", *after])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines() == [
        "(0 of 3: no later fire time within 50 years, or before the calendar ends at 9999-12-31)"
    ]
    # The fire times that exist are printed before it.
    earlier = ["--after", "9999-12-30T10:00:00Z", "-n", "3"]
    result = CliRunner().invoke(app, ["schedules", "preview", "0 9 * * 1-5", *earlier])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2 and lines[0].endswith("=  9999-12-31T09:00:00Z"), lines


@pytest.mark.parametrize(
    ("after", "tz"),
    [("0001-01-01T00:00:00+05:00", "UTC"), ("0001-01-01T02:00:00Z", "America/New_York")],
)
def test_preview_before_year_one_is_one_line(after: str, tz: str) -> None:
    args = ["schedules", "preview", "0 9 * * 1-5", "--after", after, "--tz", tz, "-n", "3"]
    lines = refused(CliRunner().invoke(app, args))
    assert lines[0].startswith("error: after: ") and "is too early" in lines[0], lines
    assert lines[1:] == [f"hint: {see('SCHEDULER', 'for the cron syntax and DST rules')}"]


# ------------------------------------------------------------------ 5. an unknown project


@pytest.mark.parametrize("ref", ["ACME/Shop", "a/b/c", "999", "0"])
async def test_jobs_in_an_unknown_project_exits_2_like_every_other_command(
    cli: CliRunner, conn: Conn, ref: str
) -> None:
    await _project(conn)
    listed = refused(await invoke(cli, ["jobs", "--project", ref]))
    shown = refused(await invoke(cli, ["jobs", "show", "1", "--project", ref]))
    assert listed == shown
    assert listed[0].startswith(f"error: project {ref!r} does not exist in this database")


# ------------------------------------------------------------------ 6. an unknown job


@pytest.mark.parametrize("command", ["why", "retry", "run-now", "show", "cancel"])
async def test_every_job_subcommand_says_the_same_about_an_unknown_job(
    cli: CliRunner, conn: Conn, command: str
) -> None:
    await _project(conn)
    assert refused(await invoke(cli, ["jobs", command, "999999"])) == [UNKNOWN_JOB]


async def test_an_unknown_project_still_names_the_project_not_the_job(
    cli: CliRunner, conn: Conn
) -> None:
    lines = refused(await invoke(cli, ["jobs", "why", "999999", "--project", "no/such"]))
    assert lines[0].startswith("error: project 'no/such' does not exist"), lines


# ------------------------------------------------------------------ 7. jobs --help


def test_jobs_help_names_every_subcommand() -> None:
    result = CliRunner().invoke(app, ["jobs", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    intro = result.output.split("Options")[0]
    for command in ("show", "why", "cancel", "retry", "run-now", "bulk"):
        assert command in intro, (command, intro)
