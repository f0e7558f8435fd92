"""Request bodies are bounded before anything reads them (api/body_limit.py).

Found by a user check (2026-12-05): a 200 MB body sent to the unauthenticated login route was
read and parsed whole (1.5 s, the API process at 1.1 GB) before it was refused.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from jobyard.api.body_limit import MAX_BODY_BYTES
from jobyard.db.pool import Conn
from jobyard.domain.enums import Role
from tests.api.conftest import Tenant
from tests.api.engine_helpers import base, error_of, make_queue, scalar
from tests.api.processes import api_process


async def test_a_declared_body_over_the_bound_is_refused_with_the_envelope(
    client: httpx.AsyncClient,
) -> None:
    big = b'{"email": "a@b.c", "password": "' + b"x" * MAX_BODY_BYTES + b'"}'
    r = await client.post(
        "/api/v1/auth/login", content=big, headers={"content-type": "application/json"}
    )
    err = error_of(r, 413, "payload_too_large")
    assert err["details"] == {"limit_bytes": MAX_BODY_BYTES} and err["request_id"]
    assert r.headers["x-request-id"] == err["request_id"]


async def test_a_chunked_body_is_counted_and_refused_past_the_bound(
    client: httpx.AsyncClient,
) -> None:
    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: sent chunked
        for _ in range(20):
            yield b" " * (MAX_BODY_BYTES // 10)

    r = await client.post(
        "/api/v1/auth/login", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in r.request.headers
    error_of(r, 413, "payload_too_large")


async def test_a_batch_of_a_thousand_payloads_passes_the_bound_of_its_route(
    client: httpx.AsyncClient, conn: Conn, tenant_a: Tenant
) -> None:
    await make_queue(client, tenant_a)
    jobs = [{"handler": "h", "payload": {"blob": "x" * 2000}} for _ in range(1000)]
    url, h = f"{base(tenant_a)}/jobs/batch", tenant_a.headers(Role.MEMBER)
    r = await client.post(url, json={"jobs": jobs}, headers=h)
    assert len(r.request.content) > MAX_BODY_BYTES
    assert r.status_code == 202, r.text
    assert await scalar(conn, "SELECT count(*) FROM jobs") == 1000


def test_a_real_server_answers_before_the_body_is_sent(db_url: str, tmp_path: Path) -> None:
    """Headers that declare 200 MB, and no body at all: the 413 comes back at once."""
    with api_process(db_url, tmp_path) as api:
        where = urlsplit(api.base_url)
        started = time.monotonic()
        with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
            sock.sendall(
                b"POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 209715200\r\n\r\n"
            )
            received = b""
            while chunk := sock.recv(65536):  # the server closes after the answer
                received += chunk
            answer = received.decode("latin-1")
        assert answer.startswith("HTTP/1.1 413"), answer[:200]
        assert "payload_too_large" in answer
        assert time.monotonic() - started < 5
