"""`jobyard enqueue`, `jobyard jobs` and `jobyard worker` flag handling: results and clear errors."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from jobyard.cli import app
from jobyard.worker.commands import parse_delay
from tests.worker.helpers import PROJECT


@pytest.fixture
def cli(db_url: str) -> CliRunner:
    return CliRunner(env={"JOBYARD_DATABASE_URL": db_url, "JOBYARD_PROJECT": PROJECT})


def test_enqueue_prints_the_job_id_and_status_and_jobs_lists_it(cli: CliRunner) -> None:
    now = cli.invoke(app, ["enqueue", "noop", "--create-queue"])
    assert now.exit_code == 0, now.output
    assert now.output.strip() == "job 1 queued"
    later = cli.invoke(
        app,
        ["enqueue", "sleep", "--queue", "reports", "--payload", '{"seconds": 2}',
         "--delay", "5m", "--priority", "3", "--idempotency-key", "nightly", "--create-queue"],
    )  # fmt: skip
    assert later.exit_code == 0, later.output
    assert later.output.strip() == "job 2 scheduled"
    again = cli.invoke(
        app,
        ["enqueue", "sleep", "--queue", "reports", "--payload", '{"seconds": 2}',
         "--idempotency-key", "nightly"],
    )  # fmt: skip
    assert "job 2 scheduled (already enqueued with this idempotency key)" in again.output
    listed = cli.invoke(app, ["jobs", "--status", "scheduled"])
    assert listed.exit_code == 0, listed.output
    assert "reports" in listed.output and "sleep" in listed.output and "0/5" in listed.output
    assert "noop" not in listed.output
    everything = cli.invoke(app, ["jobs", "--limit", "5"])
    assert "noop" in everything.output and "sleep" in everything.output
    # `jobs list` too, as `queues list` and `dlq list` (a user typed it and got "No such command").
    listed_too = cli.invoke(app, ["jobs", "list", "--status", "scheduled"])
    assert listed_too.exit_code == 0, listed_too.output
    assert listed_too.output == listed.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["enqueue", "noop", "--payload", "{oops", "--create-queue"],
            "--payload is not valid JSON",
        ),
        (["enqueue", "noop", "--delay", "soon", "--create-queue"], "--delay must be a duration"),
        (["enqueue", "noop", "--queue", "bad queue", "--create-queue"], "queue"),
        (
            ["enqueue", "noop", "--create-queue", "--payload", '{"x": "' + "y" * 70_000 + '"}'],
            "64 KB",
        ),
        (["jobs", "--status", "sleeping"], "--status must be one of"),
        (["jobs", "list", "--status", "sleeping"], "--status must be one of"),
        (["worker", "--app", "no_colon_here"], "--app must look like 'package.module:app'"),
        (["worker", "--app", "not_a_module_xyz:app"], "cannot import module 'not_a_module_xyz'"),
        # The user's module fails: the error and its place in their code, not a traceback.
        (
            ["worker", "--app", "tests.worker.raising_app:app"],
            "importing 'tests.worker.raising_app' raised RuntimeError: boom at import"
            " (at tests/worker/raising_app.py:",
        ),
        (
            ["worker", "--app", "tests.worker.missing_dependency_app:app"],
            "importing 'tests.worker.missing_dependency_app' raised ModuleNotFoundError: No module"
            " named 'not_installed_dependency_xyz' (at tests/worker/missing_dependency_app.py:",
        ),
        (["worker", "--app", "tests.acceptance.apps:nothing"], "has no attribute 'nothing'"),
        (["worker", "--app", "tests.worker.helpers:PROJECT"], "is a str, not a jobyard.App"),
        (["worker", "--queues", " , "], "--queues needs at least one queue name"),
    ],
)
def test_bad_input_gets_a_clear_error_without_a_traceback(
    cli: CliRunner, args: list[str], message: str
) -> None:
    result = cli.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_bad_json_hint_shows_how_to_quote_it(cli: CliRunner) -> None:
    result = cli.invoke(app, ["enqueue", "noop", "--payload", "{seconds: 2}", "--create-queue"])
    assert """--payload '{"seconds": 2}'""" in result.output


def test_delay_units() -> None:
    assert [parse_delay(t) for t in ("5", "5s", "500ms", "2m", "1.5h", "1d")] == [
        5.0,
        5.0,
        0.5,
        120.0,
        5400.0,
        86400.0,
    ]
