"""`jobyard jobs why|retry|run-now|cancel|bulk`: results and one-line errors."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from jobyard.cli import app
from tests.worker.helpers import PROJECT


@pytest.fixture
def cli(db_url: str) -> CliRunner:
    return CliRunner(env={"JOBYARD_DATABASE_URL": db_url, "JOBYARD_PROJECT": PROJECT})


def test_why_run_now_cancel_retry_and_bulk(cli: CliRunner) -> None:
    assert (
        cli.invoke(app, ["enqueue", "noop", "--delay", "1h", "--create-queue"]).output.strip()
        == "job 1 scheduled"
    )
    why = cli.invoke(app, ["jobs", "why", "1"])
    assert why.exit_code == 0, why.output
    assert "job 1 is scheduled" in why.output and "- scheduled: Scheduled to run at" in why.output
    assert "no_live_worker" in why.output

    refused = cli.invoke(app, ["jobs", "retry", "1"])
    assert refused.exit_code == 2 and "cannot retry a job that is scheduled" in refused.output
    assert cli.invoke(app, ["jobs", "run-now", "1"]).output.strip() == "job 1 queued to run now"
    queued = cli.invoke(app, ["jobs", "why", "1"]).output
    assert "position: 0 job(s) ahead" in queued
    cli.invoke(app, ["jobs", "cancel", "1"])
    assert cli.invoke(app, ["jobs", "retry", "1"]).output.strip() == "job 1 queued again"
    missing = cli.invoke(app, ["jobs", "why", "99"])
    assert missing.exit_code == 2 and "job 99 does not exist in this project" in missing.output

    cli.invoke(app, ["enqueue", "noop", "--create-queue"])
    dry = cli.invoke(app, ["jobs", "bulk", "cancel", "--status", "queued"])
    assert "cancel: 2 matched, 2 would change" in dry.output and "add --yes" in dry.output
    assert "queued" in cli.invoke(app, ["jobs", "--status", "queued"]).output
    done = cli.invoke(app, ["jobs", "bulk", "cancel", "--status", "queued", "--yes"])
    assert done.exit_code == 0 and "cancel: 2 matched, 2 changed, 0 skipped" in done.output
    bad = cli.invoke(app, ["jobs", "bulk", "explode"])
    assert bad.exit_code == 2 and "action must be one of" in bad.output
