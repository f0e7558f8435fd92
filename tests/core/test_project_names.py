"""Project slugs and queue names are checked in core by the database's own rules, before anything
is written: a bad one is a ValidationFailed naming the rule, not a CheckViolation, and leaves no
organization, project or queue behind."""

from __future__ import annotations

from typing import Any

import pytest

from jobyard.core import projects
from jobyard.db.pool import Conn
from jobyard.domain import limits
from jobyard.domain.errors import NotFound, ValidationFailed

_TABLES = {
    "organizations": "SELECT * FROM organizations ORDER BY id",
    "projects": "SELECT * FROM projects ORDER BY id",
    "queues": "SELECT * FROM queues ORDER BY id",
}


async def _table(conn: Conn, table: str) -> list[dict[str, Any]]:
    cur = await conn.execute(_TABLES[table])
    return await cur.fetchall()


@pytest.mark.parametrize(
    ("ref", "what"),
    [
        ("Bad Org/x y", "organization"),
        ("a/b/c", "project"),
        ("a" * 64 + "/x", "organization"),
        ("acme/" + "p" * 64, "project"),
        ("acme/shop\n", "project"),  # Python's `$` would let a final newline through
        ("-acme/shop", "organization"),
        ("acme/Shop", "project"),
    ],
)
async def test_creating_a_project_with_a_bad_slug_names_the_rule_and_writes_nothing(
    conn: Conn, ref: str, what: str
) -> None:
    with pytest.raises(ValidationFailed) as raised:
        await projects.resolve_project(conn, ref, create=True)
    assert raised.value.message.startswith("project ")
    assert f": the {what} slug " in raised.value.message
    assert limits.SLUG_RULE in raised.value.message
    assert raised.value.details == {"field": "project"}
    assert await _table(conn, "organizations") == []
    assert await _table(conn, "projects") == []


async def test_the_longest_slugs_the_database_takes_are_taken(conn: Conn) -> None:
    ref = "a" * 63 + "/" + "0-" * 31 + "z"
    pid = await projects.resolve_project(conn, ref, create=True)
    assert await projects.resolve_project(conn, ref) == pid


async def test_reading_an_invalid_slug_is_not_found_not_a_validation_error(conn: Conn) -> None:
    """Reading commands say "does not exist" for any project they cannot find."""
    with pytest.raises(NotFound):
        await projects.resolve_project(conn, "ACME/Shop")


@pytest.mark.parametrize("bad", ["a b", "q" * 101, "-x", "x\n", "", "é"])
async def test_ensure_queues_checks_every_name_before_creating_any(conn: Conn, bad: str) -> None:
    pid = await projects.resolve_project(conn, "acme/shop", create=True)
    with pytest.raises(ValidationFailed) as raised:
        await projects.ensure_queues(conn, pid, ["good", bad])
    assert raised.value.message.startswith("queue name ")
    assert limits.QUEUE_NAME_RULE in raised.value.message
    assert raised.value.details == {"field": "queue"}
    assert await _table(conn, "queues") == []
    await projects.ensure_queues(conn, pid, ["good", "a" * 100, "A0_.:-"])
    assert [q["name"] for q in await _table(conn, "queues")] == ["good", "a" * 100, "A0_.:-"]
