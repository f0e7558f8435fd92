"""The EXPLAIN harness: plan shapes of the claim per index configuration, and the hint convention.

Only plan structure is asserted (nodes, indexes, rows read), never timings: the machine is shared.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobyard.cli import app
from jobyard.db import explain
from jobyard.db.pool import connect_sync
from jobyard.db.queries import QUERIES, Query

pytestmark = pytest.mark.xdist_group("explain")

ROWS = 5_000


def _claim_index(name: str) -> bool:
    """A partition's claim index (job_ready_N_claim_idx, migration 0012)."""
    return name.startswith("job_ready_") and name.endswith("_claim_idx")


@pytest.fixture(scope="module")
def progress_log() -> list[str]:
    return []


@pytest.fixture(scope="module")
def report(pg_admin_url: str, progress_log: list[str]) -> explain.ExplainReport:
    return explain.run_explain(pg_admin_url, rows=ROWS, runs=1, progress=progress_log.append)


def test_claim_with_the_full_index_reads_about_limit_rows_and_never_sorts(
    report: explain.ExplainReport,
) -> None:
    stats = report.claim_config("full").ok
    assert not stats.has_sort, stats.node_path
    assert any(_claim_index(i) for i in stats.indexes), stats.node_path
    assert stats.rows_returned == report.limit
    # LIMIT rows from the index and LIMIT jobs rows locked by key (migration 0012), plus the
    # one queue row the paused check reads.
    assert stats.rows_read <= 2 * report.limit + 2, stats


def test_claim_without_the_claim_index_sorts_or_scans(report: explain.ExplainReport) -> None:
    stats = report.claim_config("dropped").ok
    assert stats.has_sort or any(n.startswith("Seq Scan") for n in stats.node_path)
    assert not any(_claim_index(i) for i in stats.indexes)
    assert stats.rows_read > report.limit + 2


def test_claim_with_no_indexes_reads_the_whole_table(report: explain.ExplainReport) -> None:
    stats = report.claim_config("no_indexes").ok
    assert any(n.startswith("Seq Scan (job_ready_") for n in stats.node_path), stats.node_path
    assert stats.has_sort
    # The whole ready set (the claim reads job_ready, migration 0012), not only this queue's.
    assert stats.rows_read >= report.claimable


@pytest.mark.parametrize("key", ["descending", "no_id_tiebreak", "aging"])
def test_claim_orders_the_index_cannot_supply_need_a_sort(
    report: explain.ExplainReport, key: str
) -> None:
    stats = report.claim_config(key).ok
    assert stats.has_sort, stats.node_path


def test_every_configuration_claims_exactly_the_limit(report: explain.ExplainReport) -> None:
    assert report.limit > 0
    assert report.claimable_in_queue > report.limit
    assert {m.key: m.ok.rows_returned for m in report.claim} == {
        c.key: report.limit for c in explain.CLAIM_CONFIGS
    }


def test_configurations_do_not_leak_into_each_other(report: explain.ExplainReport) -> None:
    # The aging run comes after the index drops: were they still in force, its plan could not
    # tell (it reads every ready row either way), so the full configuration runs again after it.
    assert any(_claim_index(i) for i in report.claim_config("full_again").ok.indexes)


def test_every_hinted_named_query_explains_without_error(report: explain.ExplainReport) -> None:
    failures = {m.key: m.error for m in report.queries if m.error is not None}
    assert failures == {}


def test_harness_drops_its_throwaway_database(
    report: explain.ExplainReport, progress_log: list[str], pg_admin_url: str
) -> None:
    names = [m.split()[-1] for m in progress_log if m.startswith("throwaway database")]
    assert names and names[0].startswith(explain.EXPLAIN_PREFIX)
    with connect_sync(pg_admin_url) as admin:
        row = admin.execute("SELECT count(*) AS n FROM pg_database WHERE datname = %s", (names[0],))
        assert row.fetchone() == {"n": 0}


def test_report_has_machine_ratios_and_every_configuration(report: explain.ExplainReport) -> None:
    text = explain.render_markdown(report)
    assert "## Machine" in text
    assert f"{report.generated_at:%Y-%m-%d}" in text
    for config in explain.CLAIM_CONFIGS:
        assert f"| {config.label} |" in text
    full_row = next(line for line in text.splitlines() if line.startswith("| Full claim index"))
    assert "| 1.0× |" in full_row


def _query(body: str) -> Query:
    return Query("thing_get", "Get a thing.", body, "things.sql")


def test_hint_fills_fixture_ids_and_now_implicitly() -> None:
    q = _query(
        '-- Get a thing.\n-- explain: {"limit": 5}\n'
        "SELECT * FROM jobs WHERE queue_id = %(queue_id)s AND run_at < coalesce(%(now)s, now())"
        " LIMIT %(limit)s"
    )
    assert explain.explain_hint(q) == {"queue_id": "$queue_id", "now": None, "limit": 5}


def test_query_without_hint_is_not_measured() -> None:
    assert explain.explain_hint(_query("-- Get a thing.\nSELECT 1")) is None


def test_hint_that_is_not_json_names_the_query() -> None:
    with pytest.raises(explain.ExplainError, match=r"thing_get \(things.sql\).*not JSON"):
        explain.explain_hint(_query("-- Get a thing.\n-- explain: {limit: 5}\nSELECT 1"))


def test_hint_missing_a_parameter_names_it() -> None:
    body = "-- Get a thing.\n-- explain: {}\nSELECT %(name)s, %(project_id)s"
    with pytest.raises(explain.ExplainError, match=r"lacks name$"):
        explain.explain_hint(_query(body))


def test_bind_rejects_an_unknown_fixture_and_wraps_objects_as_jsonb() -> None:
    with pytest.raises(explain.ExplainError, match=r"unknown fixture '\$nope'"):
        explain.bind("thing_get", {"x": "$nope"}, {"queue_id": 1})
    bound = explain.bind("thing_get", {"q": "$queue_id", "p": {"a": 1}, "n": 3}, {"queue_id": 7})
    assert bound["q"] == 7
    assert bound["n"] == 3
    assert bound["p"].obj == {"a": 1}


def test_every_committed_hint_parses() -> None:
    for query in QUERIES.values():
        explain.explain_hint(query)  # raises ExplainError naming the query


def test_cli_db_explain_writes_the_report(pg_admin_url: str, tmp_path: Path) -> None:
    target = tmp_path / "EXPLAIN.md"
    result = CliRunner().invoke(
        app,
        ["db", "explain", "--rows", "1000", "--runs", "1", "--output", str(target)],
        env={"JOBYARD_DATABASE_URL": pg_admin_url},
    )
    assert result.exit_code == 0, result.output
    assert "job_ready" in target.read_text(encoding="utf-8")
    assert "seeding 1,000 jobs" in result.output
