"""The slug and queue-name rules in jobyard.domain.limits are the database's CHECK constraints,
and Python's match of them agrees with PostgreSQL's on the tricky cases."""

from __future__ import annotations

import re

import pytest
from pydantic import TypeAdapter

from jobyard.db.pool import Conn
from jobyard.domain import limits
from jobyard.domain.schemas import QueueName

RULES = {
    "organizations_slug_check": limits.SLUG_PATTERN,
    "projects_slug_check": limits.SLUG_PATTERN,
    "queues_name_check": limits.QUEUE_NAME_PATTERN,
}
SAMPLES = ["a", "acme", "a-b", "-a", "A", "a b", "a\n", "a_b", "a.b:c-d", "é", "", "a" * 63,
           "a" * 64, "a" * 100, "a" * 101, "0", "a/b"]  # fmt: skip


@pytest.mark.parametrize(("constraint", "pattern"), RULES.items())
async def test_the_rules_are_the_check_constraints(
    conn: Conn, constraint: str, pattern: str
) -> None:
    cur = await conn.execute(
        "SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conname = %s",
        (constraint,),
    )
    row = await cur.fetchone()
    assert row is not None, constraint
    assert f"~ '{pattern}'::text" in row["def"], row["def"]
    for sample in SAMPLES:
        cur = await conn.execute("SELECT %s::text ~ %s::text AS ok", (sample, pattern))
        found = await cur.fetchone()
        assert found is not None
        assert (re.fullmatch(pattern, sample) is not None) == found["ok"], (pattern, sample)


def test_the_api_queue_name_uses_the_same_rule() -> None:
    assert TypeAdapter(QueueName).json_schema()["pattern"] == limits.QUEUE_NAME_PATTERN
