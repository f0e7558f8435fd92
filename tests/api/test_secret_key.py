"""Issue 12 (signing key): no secret in the source. Without JOBYARD_SECRET_KEY the API generates
one on first start and keeps it (mode 0600) in the data directory; `prod` refuses to start
without a key; a token signed with the old hard-coded development secret is refused."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import ValidationError

import jobyard
from jobyard.api.app import create_app
from jobyard.api.auth import issue_access_token
from jobyard.api.secret import key_path
from jobyard.core import auth as core_auth
from jobyard.core.auth import SigningKeys
from jobyard.db.pool import Conn, Pool
from jobyard.domain.enums import Role
from jobyard.domain.errors import ConfigurationError
from jobyard.domain.ids import UserId
from jobyard.domain.settings import Settings
from tests.api.conftest import Tenant

# The value domain/settings.py shipped before issue 12, kept here only to prove it is dead.
OLD_DEV_SECRET = "jobyard-dev-secret-change-me-0123456789abcdef"
SRC = Path(jobyard.__file__).parent


@pytest.fixture
def keyless(db_url: str, tmp_path: Path) -> Settings:
    return Settings(env="dev", database_url=db_url, data_dir=tmp_path / "data")


def test_no_secret_is_written_in_the_source() -> None:
    hits = [p for p in SRC.rglob("*.py") if OLD_DEV_SECRET in p.read_text(encoding="utf-8")]
    assert hits == []
    assert Settings(env="dev").secret_key is None


def test_prod_refuses_to_start_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBYARD_SECRET_KEY", raising=False)
    with pytest.raises(ValidationError, match="JOBYARD_SECRET_KEY must be set"):
        Settings(env="prod")
    with pytest.raises(ValidationError, match="at least 32"):
        Settings(env="prod", secret_key="short")  # type: ignore[arg-type]
    assert Settings(env="prod", secret_key="x" * 32).secret_key is not None  # type: ignore[arg-type]


def test_a_generated_key_is_kept_private_and_reused(
    keyless: Settings, api_pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    first = create_app(keyless, pool=api_pool)
    path = key_path(keyless)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().strip()) >= 43  # 256 random bits, url-safe base64
    second = create_app(keyless, pool=api_pool)
    assert first.state.keys == second.state.keys  # the same key after a restart
    warnings = [
        str(r.msg)
        for r in caplog.records
        if r.levelno == logging.WARNING and "generated secret" in str(r.msg)
    ]
    assert len(warnings) == 2  # one line per API start
    assert path.read_text().strip() not in "".join(warnings)


def test_a_key_file_others_can_read_is_refused(keyless: Settings, api_pool: Pool) -> None:
    path = key_path(keyless)
    path.parent.mkdir(parents=True)
    path.write_text("k" * 43)
    path.chmod(0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        create_app(keyless, pool=api_pool)


async def test_a_token_signed_with_the_old_dev_secret_is_refused(
    keyless: Settings, api_pool: Pool, tenant_a: Tenant, conn: Conn
) -> None:
    """The attack run minted a 10-year token with the hard-coded secret and it was accepted."""
    app: FastAPI = create_app(keyless, pool=api_pool)
    user_id = UserId(tenant_a.users[Role.OWNER].id)
    session = await core_auth.start_session(conn, user_id)  # a real, live session id
    forged, _ = issue_access_token(SigningKeys.derive(OLD_DEV_SECRET), user_id, session.family_id)
    genuine, _ = issue_access_token(app.state.keys, user_id, session.family_id)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        refused = await client.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {forged}"})
        accepted = await client.get(
            "/api/v1/auth/me", headers={"Authorization": f"Bearer {genuine}"}
        )
    assert refused.status_code == 401
    assert accepted.status_code == 200
