"""The http_request handler against real loopback HTTP servers that count their connections.

The guard refuses loopback, so a refused request must leave every server at 0 accepted
connections. The positive paths pass `allow_addresses` to exempt exactly the server address.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jobyard.domain.errors import ValidationFailed
from jobyard.worker.handlers.http_request import (
    MAX_RESPONSE_BYTES,
    HttpRequestFailed,
    PinnedTransport,
    TooManyRedirects,
    http_request,
)
from jobyard.worker.handlers.ssrf import IPAddress, SSRFBlocked

LOOPBACK = ipaddress.ip_address("127.0.0.1")
ONLY_LOOPBACK = frozenset({LOOPBACK})


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


Responder = Callable[[Seen, asyncio.StreamWriter], Awaitable[None]]


def response_bytes(status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def ok(seen: Seen, writer: asyncio.StreamWriter) -> None:
    writer.write(response_bytes(200, {"Content-Type": "text/plain"}, b"hello from loopback"))


@dataclass
class LoopbackServer:
    """A minimal HTTP/1.1 server (one request per connection) that counts what reaches it."""

    host: str
    responder: Responder = ok
    connections: int = 0
    requests: list[Seen] = field(default_factory=list)
    port: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    server: asyncio.Server | None = None

    @property
    def base(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.connections += 1
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            request_line, *header_lines = head.split("\r\n")
            method, target, _ = request_line.split(" ", 2)
            headers: dict[str, str] = {}
            for line in header_lines:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            body = await reader.readexactly(length) if length else b""
            seen = Seen(method, target, headers, body)
            self.requests.append(seen)
            await self.responder(seen, writer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.tasks.discard(task)


@pytest.fixture
async def server() -> AsyncIterator[LoopbackServer]:
    srv = LoopbackServer("127.0.0.1")
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def other() -> AsyncIterator[LoopbackServer]:
    """A second server on 127.0.0.2: also loopback, but not in the test's allowed set."""
    srv = LoopbackServer("127.0.0.2")
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def server_v6() -> AsyncIterator[LoopbackServer]:
    srv = LoopbackServer("::1")
    await srv.start()
    yield srv
    await srv.stop()


class Resolver:
    def __init__(self, answers: dict[str, Sequence[str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append((host, port))
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.answers[host]


class TransportSpy:
    """Builds the real pinned transport and records which addresses each hop was pinned to."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.pinned: list[list[IPAddress]] = []
        self.ssl_context = ssl_context

    def __call__(self, addresses: Sequence[IPAddress]) -> httpx.AsyncBaseTransport:
        self.pinned.append(list(addresses))
        return PinnedTransport(addresses, ssl_context=self.ssl_context)


def redirect_to(location: Callable[[Seen], str], status: int = 302) -> Responder:
    async def respond(seen: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(response_bytes(status, {"Location": location(seen)}))

    return respond


# --- refused before any connection -------------------------------------------------------------

REFUSED_HOSTS = [
    "127.0.0.1",
    "127.0.0.2",
    "2130706433",
    "0177.1",  # octal (httpx itself rejects the 4-part 0177.0.0.1, see below)
    "0177.0.1",
    "0x7f.0.0.1",
    "0x7f000001",
    "127.1",
    "127.0.1",
    "0.0.0.0",  # Linux delivers a connect to 0.0.0.0 to the local listener
    "0",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[2002:7f00:1::]",
    "[64:ff9b::7f00:1]",
    "[::127.0.0.1]",
    "10.0.0.1",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "[fc00::1]",
    "[fe80::1]",
    "[::]",
    "localhost",
    "LocalHost.",
    "evil.example",
]


@pytest.mark.parametrize("host", REFUSED_HOSTS)
async def test_refused_destination_is_never_connected(
    host: str, server: LoopbackServer, other: LoopbackServer
) -> None:
    spy = TransportSpy()
    resolver = Resolver({"evil.example": ["127.0.0.1"]})
    with pytest.raises(SSRFBlocked) as caught:
        await http_request(
            {"url": f"http://{host}:{server.port}/"}, resolver=resolver, transport_factory=spy
        )
    assert caught.value.code == "ssrf_blocked"
    assert (server.connections, other.connections) == (0, 0)
    assert spy.pinned == []


@pytest.mark.parametrize("host", ["0177.0.0.1", "127.000.000.001", "00.0.0.0"])
async def test_zero_padded_dotted_quads_are_refused_as_invalid_urls(
    host: str, server: LoopbackServer
) -> None:
    spy = TransportSpy()
    with pytest.raises(ValidationFailed, match=r"url: not a valid URL"):
        await http_request({"url": f"http://{host}:{server.port}/"}, transport_factory=spy)
    assert spy.pinned == []
    assert server.connections == 0


async def test_ipv6_loopback_is_never_connected(server_v6: LoopbackServer) -> None:
    spy = TransportSpy()
    with pytest.raises(SSRFBlocked):
        await http_request({"url": server_v6.base + "/"}, transport_factory=spy)
    assert spy.pinned == []
    assert server_v6.connections == 0


async def test_real_localhost_with_the_system_resolver_is_never_connected(
    server: LoopbackServer,
) -> None:
    with pytest.raises(SSRFBlocked):
        await http_request({"url": f"http://localhost:{server.port}/"})
    assert server.connections == 0


async def test_name_with_one_forbidden_address_among_allowed_is_never_connected(
    server: LoopbackServer,
) -> None:
    resolver = Resolver({"mixed.example": ["127.0.0.1", "10.0.0.1"]})
    with pytest.raises(SSRFBlocked, match=r"10\.0\.0\.1"):
        await http_request(
            {"url": f"http://mixed.example:{server.port}/"},
            resolver=resolver,
            allow_addresses=ONLY_LOOPBACK,
        )
    assert server.connections == 0


# --- the positive path, with exactly 127.0.0.1 allowed ------------------------------------------


async def test_request_connects_to_the_pinned_checked_address(server: LoopbackServer) -> None:
    # app.example exists only in this resolver: any second lookup (by httpx, httpcore or anyio)
    # would fail, so a response proves the socket went to the address that was checked.
    resolver = Resolver({"app.example": ["127.0.0.1"]})
    spy = TransportSpy()
    result = await http_request(
        {"url": f"http://app.example:{server.port}/hello?x=1", "headers": {"X-Trace": "t1"}},
        resolver=resolver,
        transport_factory=spy,
        allow_addresses=ONLY_LOOPBACK,
    )
    assert result["status"] == 200
    assert result["body"] == "hello from loopback"
    assert result["headers"]["content-type"] == "text/plain"
    assert result["url"] == f"http://app.example:{server.port}/hello?x=1"
    assert result["truncated"] is False
    assert isinstance(result["elapsed_ms"], int)
    assert resolver.calls == [("app.example", server.port)]
    assert spy.pinned == [[LOOPBACK]]
    assert server.connections == 1
    (seen,) = server.requests
    assert seen.target == "/hello?x=1"
    assert seen.headers["host"] == f"app.example:{server.port}"
    assert seen.headers["x-trace"] == "t1"


async def test_pinned_transport_tries_checked_addresses_in_order(server: LoopbackServer) -> None:
    # Nothing listens on 127.0.0.3 at this port: the refusal falls through to 127.0.0.1.
    resolver = Resolver({"app.example": ["127.0.0.3", "127.0.0.1"]})
    result = await http_request(
        {"url": f"http://app.example:{server.port}/"},
        resolver=resolver,
        allow_addresses=frozenset({LOOPBACK, ipaddress.ip_address("127.0.0.3")}),
    )
    assert result["status"] == 200
    assert server.connections == 1


async def test_redirect_to_a_disallowed_address_is_refused_without_connecting(
    server: LoopbackServer, other: LoopbackServer
) -> None:
    server.responder = redirect_to(lambda _: f"{other.base}/internal")
    spy = TransportSpy()
    with pytest.raises(SSRFBlocked, match=r"127\.0\.0\.2"):
        await http_request(
            {"url": f"{server.base}/start"}, transport_factory=spy, allow_addresses=ONLY_LOOPBACK
        )
    assert server.connections == 1
    assert other.connections == 0
    assert spy.pinned == [[LOOPBACK]]


@pytest.mark.parametrize(
    "location",
    [
        "http://evil.example:{port}/",
        "http://0x7f000002:{port}/",
        "http://localhost:{port}/",
        "http://[::ffff:127.0.0.2]:{port}/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "//192.168.0.1/",
    ],
)
async def test_redirect_to_a_private_target_in_any_spelling_is_refused(
    location: str, server: LoopbackServer, other: LoopbackServer
) -> None:
    server.responder = redirect_to(lambda _: location.format(port=other.port))
    spy = TransportSpy()
    with pytest.raises(SSRFBlocked):
        await http_request(
            {"url": f"{server.base}/"},
            resolver=Resolver({"evil.example": ["127.0.0.2"]}),
            transport_factory=spy,
            allow_addresses=ONLY_LOOPBACK,
        )
    assert len(spy.pinned) == 1
    assert other.connections == 0


async def test_redirect_to_a_non_http_scheme_is_refused(server: LoopbackServer) -> None:
    server.responder = redirect_to(lambda _: "file:///etc/passwd")
    with pytest.raises(SSRFBlocked, match="file"):
        await http_request({"url": f"{server.base}/"}, allow_addresses=ONLY_LOOPBACK)


async def test_authorization_is_not_sent_to_a_redirect_target(
    server: LoopbackServer, other: LoopbackServer
) -> None:
    server.responder = redirect_to(lambda _: f"{other.base}/landing")
    result = await http_request(
        {
            "url": f"{server.base}/start",
            "headers": {
                "Authorization": "Bearer s3cret",
                "Cookie": "sid=1",
                "X-Api-Key": "k3y",
                "X-Auth-Token": "t0ken",
                "Accept": "application/json",
            },
        },
        allow_addresses=frozenset({LOOPBACK, ipaddress.ip_address("127.0.0.2")}),
    )
    assert result["status"] == 200
    assert result["redirects"] == 1
    assert result["url"] == f"{other.base}/landing"
    (first,) = server.requests
    (second,) = other.requests
    assert first.headers["authorization"] == "Bearer s3cret"
    assert "authorization" not in second.headers
    assert "cookie" not in second.headers
    # Issue 12: payload headers other than a safe list never reach another origin.
    assert first.headers["x-api-key"] == "k3y"
    assert "x-api-key" not in second.headers
    assert "x-auth-token" not in second.headers
    assert second.headers["accept"] == "application/json"
    assert second.headers["user-agent"].startswith("jobyard-http-request/")


async def test_payload_headers_follow_a_same_origin_redirect(server: LoopbackServer) -> None:
    async def respond(seen: Seen, writer: asyncio.StreamWriter) -> None:
        if seen.target == "/start":
            writer.write(response_bytes(307, {"Location": "/next"}))
        else:
            await ok(seen, writer)

    server.responder = respond
    await http_request(
        {"url": f"{server.base}/start", "headers": {"X-Api-Key": "k3y"}},
        allow_addresses=ONLY_LOOPBACK,
    )
    assert [s.headers.get("x-api-key") for s in server.requests] == ["k3y", "k3y"]


async def test_authorization_is_stripped_even_on_a_same_origin_redirect(
    server: LoopbackServer,
) -> None:
    async def respond(seen: Seen, writer: asyncio.StreamWriter) -> None:
        if seen.target == "/start":
            writer.write(response_bytes(307, {"Location": "/next"}))
        else:
            await ok(seen, writer)

    server.responder = respond
    await http_request(
        {"url": f"{server.base}/start", "headers": {"authorization": "Basic dTpw"}},
        allow_addresses=ONLY_LOOPBACK,
    )
    assert [s.headers.get("authorization") for s in server.requests] == ["Basic dTpw", None]


def hop_chain(last: int | None) -> Responder:
    """/hop/N redirects to /hop/N+1; /hop/<last> answers 200 (None: redirect forever)."""

    async def respond(seen: Seen, writer: asyncio.StreamWriter) -> None:
        n = int(seen.target.rsplit("/", 1)[1])
        if n == last:
            await ok(seen, writer)
        else:
            writer.write(response_bytes(302, {"Location": f"/hop/{n + 1}"}))

    return respond


async def test_three_redirects_are_followed(server: LoopbackServer) -> None:
    server.responder = hop_chain(last=3)
    result = await http_request({"url": f"{server.base}/hop/0"}, allow_addresses=ONLY_LOOPBACK)
    assert result["redirects"] == 3
    assert result["url"].endswith("/hop/3")
    assert [s.target for s in server.requests] == ["/hop/0", "/hop/1", "/hop/2", "/hop/3"]


async def test_a_fourth_redirect_is_refused(server: LoopbackServer) -> None:
    server.responder = hop_chain(last=None)
    with pytest.raises(TooManyRedirects) as caught:
        await http_request({"url": f"{server.base}/hop/0"}, allow_addresses=ONLY_LOOPBACK)
    assert caught.value.code == "too_many_redirects"
    assert isinstance(caught.value, HttpRequestFailed)
    assert [s.target for s in server.requests] == ["/hop/0", "/hop/1", "/hop/2", "/hop/3"]
    assert server.connections == 4


async def test_body_read_stops_at_the_cap(server: LoopbackServer) -> None:
    sent = 0
    finished = False

    async def endless(seen: Seen, writer: asyncio.StreamWriter) -> None:
        nonlocal sent, finished
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        chunk = b"x" * 65536
        while sent < 256 * MAX_RESPONSE_BYTES:  # 256 MiB: far past the cap
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)
        finished = True

    server.responder = endless
    result = await http_request({"url": f"{server.base}/big"}, allow_addresses=ONLY_LOOPBACK)
    assert result["truncated"] is True
    assert len(result["body"]) == MAX_RESPONSE_BYTES
    await asyncio.wait(server.tasks, timeout=60)  # the server sees the client hang up
    assert finished is False
    assert sent < 256 * MAX_RESPONSE_BYTES


async def test_body_at_exactly_the_cap_is_not_truncated(server: LoopbackServer) -> None:
    async def exact(seen: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(response_bytes(200, {}, b"y" * MAX_RESPONSE_BYTES))

    server.responder = exact
    result = await http_request({"url": f"{server.base}/"}, allow_addresses=ONLY_LOOPBACK)
    assert result["truncated"] is False
    assert len(result["body"]) == MAX_RESPONSE_BYTES


# --- methods, bodies, statuses ------------------------------------------------------------------


async def test_json_body_is_sent_with_its_content_type(server: LoopbackServer) -> None:
    await http_request(
        {"url": f"{server.base}/", "method": "post", "json": {"a": [1, "é"]}},
        allow_addresses=ONLY_LOOPBACK,
    )
    (seen,) = server.requests
    assert seen.method == "POST"
    assert seen.headers["content-type"] == "application/json"
    assert seen.body == '{"a":[1,"é"]}'.encode()


async def test_303_after_post_becomes_get_without_body(server: LoopbackServer) -> None:
    async def respond(seen: Seen, writer: asyncio.StreamWriter) -> None:
        if seen.target == "/form":
            writer.write(response_bytes(303, {"Location": "/done"}))
        else:
            await ok(seen, writer)

    server.responder = respond
    await http_request(
        {"url": f"{server.base}/form", "method": "POST", "body": "a=1"},
        allow_addresses=ONLY_LOOPBACK,
    )
    first, second = server.requests
    assert (first.method, first.body) == ("POST", b"a=1")
    assert (second.method, second.body) == ("GET", b"")


async def test_307_keeps_method_and_body(server: LoopbackServer) -> None:
    async def respond(seen: Seen, writer: asyncio.StreamWriter) -> None:
        if seen.target == "/a":
            writer.write(response_bytes(307, {"Location": "/b"}))
        else:
            await ok(seen, writer)

    server.responder = respond
    await http_request(
        {"url": f"{server.base}/a", "method": "PUT", "body": "payload"},
        allow_addresses=ONLY_LOOPBACK,
    )
    assert [(s.method, s.body) for s in server.requests] == [("PUT", b"payload")] * 2


async def test_non_2xx_fails_the_job(server: LoopbackServer) -> None:
    async def unavailable(seen: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(response_bytes(503, {}, b"busy"))

    server.responder = unavailable
    with pytest.raises(HttpRequestFailed) as caught:
        await http_request({"url": f"{server.base}/"}, allow_addresses=ONLY_LOOPBACK)
    assert caught.value.code == "http_request_failed"
    assert caught.value.details["status"] == 503
    assert "503" in caught.value.message


async def test_expect_status_accepts_listed_and_refuses_others(server: LoopbackServer) -> None:
    async def not_found(seen: Seen, writer: asyncio.StreamWriter) -> None:
        writer.write(response_bytes(404, {}, b"nope"))

    server.responder = not_found
    result = await http_request(
        {"url": f"{server.base}/", "expect_status": [404]}, allow_addresses=ONLY_LOOPBACK
    )
    assert (result["status"], result["body"]) == (404, "nope")
    server.responder = ok
    with pytest.raises(HttpRequestFailed, match="200"):
        await http_request(
            {"url": f"{server.base}/", "expect_status": [404]}, allow_addresses=ONLY_LOOPBACK
        )


async def test_expected_redirect_status_is_returned_not_followed(server: LoopbackServer) -> None:
    server.responder = redirect_to(lambda _: "http://10.0.0.1/")
    result = await http_request(
        {"url": f"{server.base}/", "expect_status": [302]}, allow_addresses=ONLY_LOOPBACK
    )
    assert result["status"] == 302
    assert result["headers"]["location"] == "http://10.0.0.1/"


async def test_head_request_has_no_body(server: LoopbackServer) -> None:
    result = await http_request(
        {"url": f"{server.base}/", "method": "HEAD"}, allow_addresses=ONLY_LOOPBACK
    )
    assert result["status"] == 200
    assert result["body"] == ""
    assert server.requests[0].method == "HEAD"


async def test_silent_server_times_out_as_a_failed_request(server: LoopbackServer) -> None:
    async def silent(seen: Seen, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3600)

    server.responder = silent
    with pytest.raises(HttpRequestFailed, match=r"Timeout|within"):
        await http_request(
            {"url": f"{server.base}/", "timeout_s": 0.3}, allow_addresses=ONLY_LOOPBACK
        )


async def test_refused_connection_is_a_failed_request(server: LoopbackServer) -> None:
    port = server.port
    await server.stop()
    with pytest.raises(HttpRequestFailed, match="ConnectError"):
        await http_request({"url": f"http://127.0.0.1:{port}/"}, allow_addresses=ONLY_LOOPBACK)


# --- TLS: SNI and certificate checks use the name while the socket goes to the pinned IP --------


def _self_signed(name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


async def test_https_uses_the_name_for_sni_and_certificate_while_dialling_the_checked_ip(
    tmp_path: Any,
) -> None:
    cert_pem, key_pem = _self_signed("secure.example")
    (tmp_path / "cert.pem").write_bytes(cert_pem)
    (tmp_path / "key.pem").write_bytes(key_pem)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    sni_seen: list[str | None] = []

    def record_sni(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        sni_seen.append(name)

    server_ctx.sni_callback = record_sni

    srv = LoopbackServer("127.0.0.1")
    srv.server = await asyncio.start_server(srv._handle, "127.0.0.1", 0, ssl=server_ctx)
    srv.port = srv.server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cadata=cert_pem.decode())
    try:
        resolver = Resolver({"secure.example": ["127.0.0.1"]})
        result = await http_request(
            {"url": f"https://secure.example:{srv.port}/tls"},
            resolver=resolver,
            transport_factory=TransportSpy(ssl_context=client_ctx),
            allow_addresses=ONLY_LOOPBACK,
        )
        assert result["status"] == 200
        assert sni_seen == ["secure.example"]
        assert srv.requests[0].headers["host"] == f"secure.example:{srv.port}"

        # The same pinned IP under a name the certificate does not cover fails verification.
        resolver.answers["other.example"] = ["127.0.0.1"]
        with pytest.raises(HttpRequestFailed, match="ConnectError"):
            await http_request(
                {"url": f"https://other.example:{srv.port}/tls"},
                resolver=resolver,
                transport_factory=TransportSpy(ssl_context=client_ctx),
                allow_addresses=ONLY_LOOPBACK,
            )
    finally:
        await srv.stop()


# --- bad payloads ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "field_name"),
    [
        ({}, "url"),
        ({"url": "ftp://example.com/"}, "url"),
        ({"url": "file:///etc/passwd"}, "url"),
        ({"url": "gopher://127.0.0.1:6379/_INFO"}, "url"),
        ({"url": "http://user:pw@example.com/"}, "url"),
        ({"url": "http://"}, "url"),
        ({"url": "https://example.com/", "method": "TRACE"}, "method"),
        ({"url": "https://example.com/", "timeout_s": 61}, "timeout_s"),
        ({"url": "https://example.com/", "timeout_s": 0}, "timeout_s"),
        ({"url": "https://example.com/", "expect_status": []}, "expect_status"),
        ({"url": "https://example.com/", "expect_status": [99]}, "expect_status.0"),
        ({"url": "https://example.com/", "headers": {"Host": "internal"}}, "headers"),
        ({"url": "https://example.com/", "headers": {"X-A": "a\r\nX-B: b"}}, "headers"),
        ({"url": "https://example.com/", "headers": {"Bad Name": "v"}}, "headers"),
        ({"url": "https://example.com/", "json": {}, "body": "x"}, "payload"),
        ({"url": "https://example.com/", "bogus": 1}, "bogus"),
    ],
)
async def test_bad_payload_is_refused_naming_the_field(
    payload: dict[str, Any], field_name: str
) -> None:
    spy = TransportSpy()
    with pytest.raises(ValidationFailed) as caught:
        await http_request(payload, transport_factory=spy)
    assert caught.value.code == "validation_error"
    assert f"{field_name}:" in caught.value.message
    assert spy.pinned == []


async def test_bad_payload_message_does_not_echo_values() -> None:
    with pytest.raises(ValidationFailed) as caught:
        await http_request({"url": "https://example.com/", "headers": {"X-A": "s3cret\n"}})
    assert "s3cret" not in caught.value.message
