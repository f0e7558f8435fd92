"""`jobyard accounts create-owner`: the first account of an organization on your own database.

Found by a user check (2026-12-05): the only way to a login was `jobyard seed`, whose demo
password is published. The command makes an account with the password its user types, as the
first owner of the organization the SDK and workers use; once it has one, owners invite.
"""

from __future__ import annotations

import asyncio

import httpx
from typer.testing import CliRunner, Result

from jobyard.cli import app
from jobyard.core import projects
from jobyard.db.pool import Conn
from tests.api.test_auth import API

PASSWORD = "a-long-enough-passphrase"


async def _create(db_url: str, *args: str, stdin: str = PASSWORD + "\n") -> Result:
    return await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["accounts", "create-owner", *args, "--password-stdin"],
        input=stdin,
        env={"JOBYARD_DATABASE_URL": db_url, "COLUMNS": "200"},
    )


async def test_the_first_owner_signs_in_and_sees_the_project_the_sdk_made(
    db_url: str, conn: Conn, client: httpx.AsyncClient
) -> None:
    await projects.resolve_project(conn, "acme/shop", create=True)  # as `app.defer` does
    made = await _create(db_url, "Ops@Acme.test", "--org", "acme")
    assert made.exit_code == 0, made.output
    assert "created ops@acme.test, owner of organization acme" in made.output

    login = await client.post(
        f"{API}/auth/login", json={"email": "ops@acme.test", "password": PASSWORD}
    )
    assert login.status_code == 200, login.text
    headers = {"authorization": f"Bearer {login.json()['access_token']}"}
    orgs = (await client.get(f"{API}/orgs", headers=headers)).json()["items"]
    assert [(o["slug"], o["role"]) for o in orgs] == [("acme", "owner")]
    listed = await client.get(f"{API}/orgs/{orgs[0]['id']}/projects", headers=headers)
    assert [p["slug"] for p in listed.json()["items"]] == ["shop"]


async def test_a_second_owner_a_taken_email_and_bad_input_are_refused_in_one_line(
    db_url: str, conn: Conn
) -> None:
    assert (await _create(db_url, "first@acme.test", "--org", "acme")).exit_code == 0
    cases = {
        ("second@acme.test", "--org", "acme"): "already has an owner",
        ("first@acme.test", "--org", "other"): "an account with this email exists",
        ("not-an-email", "--org", "other"): "is not an email address",
        ("x@acme.test", "--org", "Bad Org"): "slug 'Bad Org' is invalid",
    }
    for args, message in cases.items():
        result = await _create(db_url, *args)
        assert result.exit_code == 2 and message in result.output, result.output
        assert "Traceback" not in result.output
    short = await _create(db_url, "y@acme.test", "--org", "other", stdin="short\n")
    assert short.exit_code == 2 and "12 to 1,024 characters" in short.output
    users = await (await conn.execute("SELECT email FROM users ORDER BY id")).fetchall()
    assert [u["email"] for u in users] == ["first@acme.test"]
    owners = await (
        await conn.execute("SELECT count(*) AS n FROM organization_members WHERE role = 'owner'")
    ).fetchone()
    assert owners is not None and owners["n"] == 1
