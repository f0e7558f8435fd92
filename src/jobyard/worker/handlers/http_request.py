"""Built-in `http_request` handler: one outgoing HTTP call behind the SSRF guard.

Every hop (the first request and each of at most 3 redirects) resolves its host once, checks
every address (`ssrf.resolve_and_check`), then dials only those addresses through a pinned
httpcore network backend. The URL keeps its host name, so the Host header, TLS SNI and
certificate verification all use the name while the socket goes to the checked IP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Annotated, Any, Final, Literal, TypeAlias

import httpcore
import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)

from jobyard.core import clock
from jobyard.domain.errors import JobyardError, ValidationFailed
from jobyard.worker.handlers.ssrf import IPAddress, Resolver, SSRFBlocked, resolve_and_check

MAX_REDIRECTS: Final = 3
MAX_RESPONSE_BYTES: Final = 1024 * 1024
MAX_TIMEOUT_S: Final = 60.0
DEFAULT_TIMEOUT_S: Final = 10.0
USER_AGENT: Final = "jobyard-http-request/1"

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
# Credentials belong to the origin the user named; a redirect target never receives them.
_CREDENTIAL_HEADERS: Final = frozenset({"authorization", "proxy-authorization", "cookie"})
# A redirect to another origin carries only these of the payload's headers: any other one
# (X-Api-Key, X-Auth-Token, …) may be a secret meant for the origin the user named.
_CROSS_ORIGIN_SAFE_HEADERS: Final = frozenset(
    {"accept", "accept-language", "content-type", "content-language", "user-agent"}
)
# Set by the client from the URL and body; letting the payload override them invites smuggling.
_RESERVED_HEADERS: Final = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_BODY_HEADERS: Final = frozenset({"content-type", "content-encoding", "content-language"})
# Response headers worth keeping in a job result; Set-Cookie and the like are left out.
_RETURNED_HEADERS: Final = (
    "content-type",
    "content-length",
    "content-encoding",
    "content-language",
    "location",
    "etag",
    "last-modified",
    "retry-after",
    "date",
    "cache-control",
    "x-request-id",
)
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE_FORBIDDEN: Final = re.compile(r"[\r\n\x00]")

Method: TypeAlias = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
StatusCode: TypeAlias = Annotated[int, Field(ge=100, le=599)]
# Given the checked addresses for one hop, the transport that may dial only those.
TransportFactory: TypeAlias = Callable[[Sequence[IPAddress]], httpx.AsyncBaseTransport]
SocketOption: TypeAlias = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class HttpRequestFailed(JobyardError):
    """The HTTP request did not get an expected response."""

    code = "http_request_failed"


class TooManyRedirects(HttpRequestFailed):
    """The server redirected more than 3 times."""

    code = "too_many_redirects"


class HttpRequestPayload(BaseModel):
    """What a job asks `http_request` to do."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    url: str = Field(max_length=8192)
    method: Method = "GET"
    headers: dict[str, str] = Field(default_factory=dict)
    json_body: JsonValue = Field(default=None, alias="json")
    body: str | None = None
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    expect_status: list[StatusCode] | None = Field(default=None, min_length=1)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        try:
            url = httpx.URL(value)
        except httpx.InvalidURL as exc:
            raise ValueError(f"not a valid URL ({exc})") from None
        if url.scheme not in _DEFAULT_PORTS:
            raise ValueError("the scheme must be http or https")
        if not url.raw_host:
            raise ValueError("the URL has no host")
        if url.userinfo:
            raise ValueError("credentials in the URL are not allowed; send an Authorization header")
        return value

    @field_validator("method", mode="before")
    @classmethod
    def _upper_method(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, header_value in value.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid header name")
            if name.lower() in _RESERVED_HEADERS:
                raise ValueError(f"the {name} header is set by jobyard and cannot be given")
            if _HEADER_VALUE_FORBIDDEN.search(header_value):
                raise ValueError(f"the {name} header value contains a line break or NUL")
        return value

    @model_validator(mode="after")
    def _one_body(self) -> HttpRequestPayload:
        if self.has_json and self.body is not None:
            raise ValueError("give either json or body, not both")
        return self

    @property
    def has_json(self) -> bool:
        # `"json": null` is a real JSON body, so presence (not the value) decides.
        return "json_body" in self.model_fields_set


def parse_payload(payload: Mapping[str, Any]) -> HttpRequestPayload:
    """The validated payload, or ValidationFailed naming each bad field (never echoing values)."""
    try:
        return HttpRequestPayload.model_validate(payload)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'payload'}: "
            + error["msg"].removeprefix("Value error, ")
            for error in exc.errors(include_url=False, include_input=False)
        ]
        raise ValidationFailed(
            "invalid http_request payload: " + "; ".join(problems), fields=problems
        ) from None


# --- transport: dial only the checked addresses ----------------------------------------------

_ERROR_MAP: Final[tuple[tuple[type[Exception], type[httpx.TransportError]], ...]] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    """httpcore errors as the httpx errors an AsyncClient caller expects."""
    try:
        yield
    except Exception as exc:
        for source, target in _ERROR_MAP:
            if isinstance(exc, source):
                raise target(str(exc) or type(exc).__name__) from exc
        raise


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials the checked addresses in order; the host name httpcore passes is ignored."""

    def __init__(self, addresses: Sequence[IPAddress]) -> None:
        self._addresses = tuple(addresses)
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        # `host` is the URL's name; resolving it again here would reopen the DNS-rebinding hole.
        error: Exception = httpcore.ConnectError("no checked address to connect to")
        for address in self._addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            with _httpx_errors():
                await close()


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport whose every connection goes to one of `addresses` (HTTP/1.1)."""

    def __init__(
        self, addresses: Sequence[IPAddress], *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(),
            network_backend=_PinnedBackend(addresses),
            http1=True,
            http2=False,
            retries=0,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(request.stream, httpx.AsyncByteStream):
            raise TypeError("PinnedTransport needs an async request body")
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _httpx_errors():
            response = await self._pool.handle_async_request(core_request)
        if not isinstance(response.stream, AsyncIterable):
            raise TypeError("httpcore returned a sync stream to an async pool")
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def pinned_transport(addresses: Sequence[IPAddress]) -> httpx.AsyncBaseTransport:
    """The default TransportFactory."""
    return PinnedTransport(addresses)


# --- the handler ------------------------------------------------------------------------------


async def http_request(
    payload: Mapping[str, Any],
    *,
    resolver: Resolver | None = None,
    transport_factory: TransportFactory | None = None,
    allow_addresses: frozenset[IPAddress] = frozenset(),
) -> dict[str, Any]:
    """Send one HTTP request described by `payload`; return status, headers, body and timing.

    Raises ValidationFailed (bad payload), SSRFBlocked (a forbidden destination on any hop,
    before connecting to it), HostUnresolvable, TooManyRedirects, or HttpRequestFailed (non-2xx
    or a status outside `expect_status`, network error, timeout). `allow_addresses` exempts
    exact addresses from the SSRF address rules; it exists for tests and stays empty in jobs.
    """
    request = parse_payload(payload)
    factory = transport_factory or pinned_transport
    started = clock.monotonic()
    try:
        async with asyncio.timeout(request.timeout_s):
            final_url, response, body, truncated, redirects = await _follow(
                request, resolver, factory, allow_addresses
            )
    except TimeoutError:
        raise HttpRequestFailed(
            f"no complete response within {request.timeout_s:g} s", timeout_s=request.timeout_s
        ) from None
    elapsed_ms = round((clock.monotonic() - started) * 1000)
    status = response.status_code
    expected = request.expect_status or range(200, 300)
    if status not in expected:
        raise HttpRequestFailed(
            f"HTTP {status} from {final_url.host}", status=status, elapsed_ms=elapsed_ms
        )
    return {
        "status": status,
        "headers": {k: response.headers[k] for k in _RETURNED_HEADERS if k in response.headers},
        "body": _decode(body, response.charset_encoding),
        "truncated": truncated,
        "elapsed_ms": elapsed_ms,
        "url": str(final_url),
        "redirects": redirects,
    }


async def _follow(
    request: HttpRequestPayload,
    resolver: Resolver | None,
    factory: TransportFactory,
    allowed: frozenset[IPAddress],
) -> tuple[httpx.URL, httpx.Response, bytes, bool, int]:
    url = httpx.URL(request.url)
    method: str = request.method
    headers = httpx.Headers({"User-Agent": USER_AGENT})
    headers.update(request.headers)  # case-insensitive: a payload "user-agent" replaces ours
    content = _initial_content(request, headers)
    for hop in range(MAX_REDIRECTS + 1):
        port = url.port or _DEFAULT_PORTS[url.scheme]
        # The check happens before a transport exists, so a refused hop never opens a socket.
        addresses = await resolve_and_check(
            url.raw_host.decode("ascii"), port, resolver, allowed=allowed
        )
        response, body, truncated = await _send(
            factory(addresses), method, url, headers, content, request.timeout_s
        )
        location = response.headers.get("location")
        status = response.status_code
        if (
            status not in _REDIRECT_STATUSES
            or location is None
            or (request.expect_status is not None and status in request.expect_status)
        ):
            return url, response, body, truncated, hop
        if hop == MAX_REDIRECTS:
            raise TooManyRedirects(
                f"more than {MAX_REDIRECTS} redirects", max_redirects=MAX_REDIRECTS
            )
        target = _redirect_target(url, location)
        method, content = _redirect_method(method, status, content, headers)
        for name in _CREDENTIAL_HEADERS:
            headers.pop(name, None)
        if _origin(target) != _origin(url):
            for name in [n for n in headers if n.lower() not in _CROSS_ORIGIN_SAFE_HEADERS]:
                headers.pop(name, None)
        url = target
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


def _initial_content(request: HttpRequestPayload, headers: httpx.Headers) -> bytes | None:
    if request.has_json:
        headers.setdefault("Content-Type", "application/json")
        text = json.dumps(request.json_body, separators=(",", ":"), ensure_ascii=False)
        return text.encode()
    return None if request.body is None else request.body.encode()


async def _send(
    transport: httpx.AsyncBaseTransport,
    method: str,
    url: httpx.URL,
    headers: httpx.Headers,
    content: bytes | None,
    timeout_s: float,
) -> tuple[httpx.Response, bytes, bool]:
    # trust_env=False: proxy variables would send the request to a proxy that resolves the name
    # itself (bypassing the pin), and .netrc would add credentials the payload never gave.
    async with httpx.AsyncClient(
        transport=transport, trust_env=False, follow_redirects=False, timeout=timeout_s
    ) as client:
        try:
            outgoing = client.build_request(method, url, headers=headers, content=content)
            response = await client.send(outgoing, stream=True)
            try:
                body, truncated = await _read_capped(response, MAX_RESPONSE_BYTES)
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise HttpRequestFailed(
                f"{type(exc).__name__} talking to {url.host}: {exc}", error=type(exc).__name__
            ) from None
    return response, body, truncated


async def _read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """At most `cap` decoded bytes; stops reading (and drops the connection) past the cap."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        room = cap - len(body)
        if len(chunk) > room:
            body += chunk[:room]
            return bytes(body), True
        body += chunk
    return bytes(body), False


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name from the server
        return body.decode("utf-8", errors="replace")


def _redirect_target(current: httpx.URL, location: str) -> httpx.URL:
    try:
        target = current.join(location)
    except httpx.InvalidURL:
        raise HttpRequestFailed("the redirect Location is not a valid URL") from None
    if target.scheme not in _DEFAULT_PORTS:
        raise SSRFBlocked(f"redirect to a {target.scheme!r} URL is not allowed")
    if not target.raw_host:
        raise HttpRequestFailed("the redirect Location has no host")
    # Userinfo in a Location would become an Authorization header the user never gave.
    return target.copy_with(username=None, password=None, fragment=None)


def _origin(url: httpx.URL) -> tuple[str, bytes, int]:
    return url.scheme, url.raw_host.lower(), url.port or _DEFAULT_PORTS[url.scheme]


def _redirect_method(
    method: str, status: int, content: bytes | None, headers: httpx.Headers
) -> tuple[str, bytes | None]:
    """Browser rules (as httpx): 303 becomes GET; 301/302 turn POST into GET; 307/308 keep all."""
    to_get = (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST")
    if not to_get:
        return method, content
    for name in _BODY_HEADERS:
        headers.pop(name, None)
    return "GET", None
