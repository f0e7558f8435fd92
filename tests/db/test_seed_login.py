"""The demo seed's login: printed with its password only when the seed set it, an existing
account's role kept, and no demo login at all with JOBYARD_ENV=prod.

Found by a user check (2026-12-05): a second `jobyard seed` printed the published password for
an account whose password had been changed, and made the operator an owner again.
"""

from __future__ import annotations

from typer.testing import CliRunner

from jobyard.cli import app
from jobyard.db.pool import connect_sync
from jobyard.db.seed import DEMO_EMAIL, DEMO_PASSWORD, login_line, seed_demo
from jobyard.domain.passwords import hash_password


def test_a_second_seed_leaves_the_account_as_its_owner_made_it(db_url: str) -> None:
    with connect_sync(db_url) as conn:
        first = seed_demo(conn, sample_jobs=False)
        assert first.user_password == DEMO_PASSWORD
        assert login_line(first) == f"{DEMO_EMAIL} / {DEMO_PASSWORD}"
        changed = hash_password("their-own-passphrase")
        conn.execute("UPDATE users SET password_hash = %s WHERE email = %s", (changed, DEMO_EMAIL))
        conn.execute("UPDATE organization_members SET role = 'admin'")
        again = seed_demo(conn, sample_jobs=False)
        row = conn.execute(
            """SELECT u.password_hash, m.role::text AS role FROM users u
               JOIN organization_members m ON m.user_id = u.id WHERE u.email = %s""",
            (DEMO_EMAIL,),
        ).fetchone()
    assert again.user_password is None and DEMO_PASSWORD not in login_line(again)
    assert "password was left as it is" in login_line(again)
    assert row == {"password_hash": changed, "role": "admin"}


def test_seed_refuses_a_production_environment(db_url: str) -> None:
    env = {
        "JOBYARD_DATABASE_URL": db_url,
        "JOBYARD_ENV": "prod",
        "JOBYARD_SECRET_KEY": "x" * 64,
        "COLUMNS": "200",
    }
    result = CliRunner().invoke(app, ["seed"], env=env)
    assert result.exit_code == 2, result.output
    assert "not with JOBYARD_ENV=prod" in result.output
    assert "jobyard accounts create-owner" in result.output
    with connect_sync(db_url) as conn:
        assert conn.execute("SELECT count(*) AS n FROM users").fetchone() == {"n": 0}
