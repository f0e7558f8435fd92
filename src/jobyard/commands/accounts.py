"""`jobyard accounts create-owner EMAIL --org SLUG`: the first account of an organization."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from jobyard.commands.common import (
    DataDir,
    fail,
    load_settings,
    open_database,
    out,
    run_with_conn,
    typer_app,
)
from jobyard.core import bootstrap

accounts_app = typer_app("Accounts: the first owner of an organization (then owners invite).")


@accounts_app.command("create-owner")
def create_owner(
    email: Annotated[str, typer.Argument(help="The new account's email (its login).")],
    org: Annotated[
        str,
        typer.Option(
            "--org",
            help="The organization's slug: the `org` of JOBYARD_PROJECT='org/project'. "
            "Created if it does not exist.",
        ),
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="Display name (default: the email's local part).")
    ] = None,
    password_stdin: Annotated[
        bool,
        typer.Option(
            "--password-stdin",
            help="Read the password from the first line of standard input instead of asking.",
        ),
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Create an account with the password you type, as the first owner of an organization.
    Refused once the organization has an owner: from then on, owners invite (dashboard:
    Members)."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    else:
        raise fail(
            "no terminal to ask for the password",
            "pipe it in: `... | jobyard accounts create-owner EMAIL --org SLUG --password-stdin`",
        )
    display = name or email.split("@", 1)[0]
    settings = load_settings(data_dir=data_dir)
    url = open_database(settings).url
    _, org_id = run_with_conn(
        url,
        lambda conn: bootstrap.create_owner(
            conn, email=email, password=password, display_name=display, org_slug=org
        ),
    )
    out.print(
        f"created {email.strip().lower()}, owner of organization {org} (id {org_id}); "
        "sign in to the dashboard (`jobyard api`) with it",
        highlight=False,
    )
