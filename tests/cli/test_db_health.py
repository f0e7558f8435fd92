"""`jobyard db health`: the dashboard's database-health panel at a terminal (issue 15 point 6):
every holder of the xmin horizon, the busiest tables' dead rows, the same warnings, and exit 1
when there is one, so a cron job or a probe can act on it."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner, Result

from jobyard.cli import app
from jobyard.commands import common
from jobyard.db.pool import Conn, connect

pytestmark = pytest.mark.xdist_group("horizon")


def _cli(db_url: str, monkeypatch: pytest.MonkeyPatch, xmin_warn_s: str) -> CliRunner:
    monkeypatch.setattr(common.out, "width", 300)  # a table never cuts what a test looks for
    return CliRunner(
        env={
            "JOBYARD_DATABASE_URL": db_url,
            "JOBYARD_HEALTH_XMIN_WARN_S": xmin_warn_s,
            "COLUMNS": "300",
        }
    )


async def _health(cli: CliRunner) -> Result:
    return await asyncio.to_thread(cli.invoke, app, ["db", "health"])


async def test_a_quiet_database_exits_0_with_its_tables(
    db_url: str, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A threshold no other test's transaction on the shared server reaches.
    result = await _health(_cli(db_url, monkeypatch, "3600"))
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "warning:" not in result.output
    for table in ("jobs", "job_ready_0", "job_ready_1", "job_ready_2"):
        assert f" {table} " in result.output, result.output


async def test_a_forgotten_transaction_is_named_and_exits_1(
    db_url: str, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = await connect(db_url, application_name="forgotten-begin")
    try:
        await holder.execute("SELECT txid_current()")  # idle in transaction, holding an xid
        await asyncio.sleep(0.6)
        result = await _health(_cli(db_url, monkeypatch, "0.5"))
    finally:
        await holder.rollback()
        await holder.close()
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "xmin horizon: held back by" in result.output
    row = next(line for line in result.output.splitlines() if "forgotten-begin" in line)
    assert " xid " in row and "idle in transaction" in row, row
    assert "warning: a transaction (pid" in result.output
    assert "forgotten-begin, idle in transaction) has held the xmin horizon" in result.output
