"""Secrets and payload values never reach the logs.

A real `jobyard api` process (debug logging, JSON to stderr) serves logins, refreshes, key
creation, key use, invitations and enqueues carrying planted secrets; then its whole stderr is
searched for each of them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from jobyard.db.pool import Conn
from jobyard.domain.passwords import hash_password
from jobyard.logs import REDACTED, configure_logging, redact_processor, redact_text
from tests.api.conftest import Tenant
from tests.api.processes import api_process

API = "/api/v1"
PASSWORD = "planted-Password-7f3a9c"
WRONG_PASSWORD = "planted-wrong-guess-51be"
PAYLOAD_VALUE = "planted-payload-value-c0ffee"


@pytest.mark.slow
async def test_no_planted_secret_appears_in_the_api_logs(
    db_url: str, conn: Conn, tenant_a: Tenant, tmp_path: Path
) -> None:
    cur = await conn.execute(
        "INSERT INTO users (email, password_hash) VALUES ('logged@example.test', %s) RETURNING id",
        (hash_password(PASSWORD),),
    )
    row = await cur.fetchone()
    assert row is not None
    await conn.execute(
        "INSERT INTO organization_members (org_id, user_id, role) VALUES (%s, %s, 'owner')",
        (tenant_a.org_id, row["id"]),
    )
    await conn.execute(
        "INSERT INTO queues (project_id, name) VALUES (%s, 'default')", (tenant_a.project_id,)
    )
    planted: dict[str, str] = {"password": PASSWORD, "wrong password": WRONG_PASSWORD}
    planted["payload value"] = PAYLOAD_VALUE
    project = f"{API}/projects/{tenant_a.project_id}"
    with api_process(db_url, tmp_path, log_level="debug") as api:
        async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as http:
            bad = await http.post(
                f"{API}/auth/login",
                json={"email": "logged@example.test", "password": WRONG_PASSWORD},
            )
            assert bad.status_code == 401
            invalid = await http.post(
                f"{API}/auth/login", json={"email": "not-an-email", "password": PASSWORD}
            )
            assert invalid.status_code == 422
            tokens = (
                await http.post(
                    f"{API}/auth/login", json={"email": "logged@example.test", "password": PASSWORD}
                )
            ).json()
            planted["access token"] = tokens["access_token"]
            planted["first refresh token"] = tokens["refresh_token"]
            rotated = (
                await http.post(
                    f"{API}/auth/refresh", json={"refresh_token": tokens["refresh_token"]}
                )
            ).json()
            planted["rotated refresh token"] = rotated["refresh_token"]
            auth = {"Authorization": f"Bearer {rotated['access_token']}"}
            planted["second access token"] = rotated["access_token"]
            created = await http.post(
                f"{project}/api-keys", headers=auth, json={"name": "logged key", "role": "member"}
            )
            assert created.status_code == 201, created.text
            key = created.json()["key"]
            planted["API key"] = key
            invited = await http.post(
                f"{API}/orgs/{tenant_a.org_id}/invitations",
                headers=auth,
                json={"email": "invitee-logged@example.test"},
            )
            assert invited.status_code == 201, invited.text
            # The link is in the log by design (the demo's stand-in for a mail); the password
            # its redeemer chooses and the tokens they get back never are.
            token = next(
                json.loads(line)["link"].split("token=", 1)[1]
                for line in api.stderr().splitlines()
                if '"invitation link"' in line
            )
            planted["invitee's own password"] = "invitee-own-password-1234"
            redeemed = await http.post(
                f"{API}/invitations/redeem",
                json={"token": token, "password": planted["invitee's own password"]},
            )
            assert redeemed.status_code == 201, redeemed.text
            planted["invitee's refresh token"] = redeemed.json()["refresh_token"]
            payload = {"card": PAYLOAD_VALUE, "nested": [{"token": PAYLOAD_VALUE}]}
            for headers in ({"X-API-Key": key}, {"Authorization": f"Bearer {key}"}):
                one = await http.post(
                    f"{project}/jobs", headers=headers, json={"handler": "noop", "payload": payload}
                )
                assert one.status_code == 202, one.text
            batch = await http.post(
                f"{project}/jobs/batch",
                headers={"X-API-Key": key},
                json={"jobs": [{"handler": "noop", "payload": payload}] * 3},
            )
            assert batch.status_code == 202, batch.text
            too_big = await http.post(
                f"{project}/jobs",
                headers={"X-API-Key": key},
                json={"handler": "noop", "payload": {"v": PAYLOAD_VALUE * 3000}},
            )
            assert too_big.status_code == 422
            assert PAYLOAD_VALUE not in too_big.text
            # Forged and revoked credentials are logged as refusals, never echoed.
            await http.get(f"{API}/auth/me", headers={"Authorization": f"Bearer {key}x"})
            await http.post(f"{API}/auth/refresh", json={"refresh_token": tokens["refresh_token"]})
    log = api.stderr()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    # The capture really holds the requests (so an empty log cannot pass this test).
    paths = {line.get("path") for line in lines}
    assert {f"{API}/auth/login", f"{API}/auth/refresh", f"{project}/jobs"} <= paths
    assert all("request_id" in line for line in lines if line.get("event") == "request")
    leaked = [name for name, value in planted.items() if value and value in log]
    assert leaked == [], f"found in the logs: {leaked}"


def test_redaction_covers_keys_free_text_and_nesting(capsys: pytest.CaptureFixture[str]) -> None:
    jwt_like = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    event: dict[str, Any] = {
        "event": f"saw {jwt_like} and jyr_{'a' * 30} and jy_{'b' * 30}",
        "Authorization": "Bearer abc.def",
        "temporary_password": "tmp-secret",
        "headers": {"X-API-Key": "jy_" + "c" * 30, "accept": "json"},
        "url": "postgresql://user:pw-secret@host/db",
        "items": [{"payload": {"v": "payload-secret"}}],
    }
    out = redact_processor(None, "info", event)
    text = json.dumps(out)
    for secret in (jwt_like, "a" * 30, "b" * 30, "c" * 30, "abc.def", "tmp-secret",
                   "pw-secret", "payload-secret"):  # fmt: skip
        assert secret not in text, secret
    assert out["headers"]["accept"] == "json"
    assert redact_text("nothing secret here") == "nothing secret here"
    # And through the configured pipeline, as every process logs.
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    configure_logging("info", "json")
    try:
        structlog.get_logger("t").info("login", password="hunter2-planted", user_id=3)
        logging.getLogger("stdlib").warning("Bearer %s", "stdlib-token-planted")
        err = capsys.readouterr().err
        assert "hunter2-planted" not in err and "stdlib-token-planted" not in err
        assert REDACTED in err and '"user_id": 3' in err
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
