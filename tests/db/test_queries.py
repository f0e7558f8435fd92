"""The named-SQL loader: what is sent is the query without its comments, and nothing else."""

from __future__ import annotations

import pytest
from psycopg import _queries as psycopg_queries

from jobyard.db.queries import QUERIES, Query, sql, without_comments


@pytest.mark.parametrize(
    ("text", "sent"),
    [
        ("SELECT 1 -- one\nFROM t", "SELECT 1\nFROM t"),
        ("-- a whole line\nSELECT 1\n    -- indented\nFROM t", "SELECT 1\nFROM t"),
        ("SELECT 1 /* a\nblock */ FROM t", "SELECT 1   FROM t"),
        # "--" and "/*" inside strings, escape strings, identifiers and dollar quotes stay.
        ("SELECT '--x', 'it''s -- x' -- gone", "SELECT '--x', 'it''s -- x'"),
        ("SELECT E'it\\'s -- x' -- gone", "SELECT E'it\\'s -- x'"),
        ('SELECT "a--b", "/*c*/" FROM t', 'SELECT "a--b", "/*c*/" FROM t'),
        ("DO $$ -- kept $$; -- gone", "DO $$ -- kept $$;"),
        ("SELECT $f$ /* kept */ $f$ /* gone */", "SELECT $f$ /* kept */ $f$"),
        # A placeholder in a comment is no parameter of the statement.
        ("SELECT %(a)s -- not %(b)s", "SELECT %(a)s"),
    ],
)
def test_without_comments_drops_comments_only(text: str, sent: str) -> None:
    assert without_comments(text) == sent


def test_sql_sends_the_statement_and_keeps_the_hint_in_the_text() -> None:
    claim = QUERIES["job_claim_batch"]
    assert sql("job_claim_batch") == claim.statement
    assert "-- explain:" in claim.sql
    assert "--" not in claim.statement


def _by_lines(text: str) -> str:
    """A second, line-based way to drop comments, for queries whose comments all start at a
    line's beginning or after code with balanced quotes."""
    kept = []
    for line in text.splitlines():
        if line.lstrip().startswith("--"):
            continue
        cut = line.find("--")
        if cut >= 0 and line[:cut].count("'") % 2 == 0:
            line = line[:cut]
        kept.append(line)
    return "\n".join(kept)


def test_every_statement_keeps_its_code() -> None:
    """Removing comments changes no token: for every named query, the statement has the same
    words, in order, as the text with its comments cut line by line."""
    for query in QUERIES.values():
        assert query.statement.split() == _by_lines(query.sql).split(), query.name


def test_hot_statements_fit_psycopg_query_cache() -> None:
    """psycopg caches its parse of a query's placeholders only up to this length; the claim,
    the completion and the enqueue run on every pickup and every batch."""
    limit = psycopg_queries.MAX_CACHED_STATEMENT_LENGTH
    for name in (
        "job_claim_batch",
        "job_claim_batch_after",
        "job_complete_many",
        "job_insert_ref",
        "job_insert_batch",
        "job_fail",
    ):
        assert len(sql(name).encode()) <= limit, name


def test_a_query_built_by_hand_strips_its_comments_too() -> None:
    query = Query("thing_get", "Get a thing.", "-- Get a thing.\nSELECT 1 -- one", "things.sql")
    assert query.statement == "SELECT 1"
