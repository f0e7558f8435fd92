"""SSRF policy for outgoing requests: which hosts and addresses a job may reach.

`parse_host_literal` and `is_forbidden` are pure; `resolve_and_check` adds the one DNS step.
The deny list is explicit because Python's `ipaddress` flags call several dangerous ranges
global (multicast, 192.0.0.0/24, 6to4 and NAT64 wrapping 127.0.0.1, IPv4-compatible ::a.b.c.d);
those flags are only a final backstop for ranges this table does not name.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Final, TypeAlias

from jobyard.domain.errors import JobyardError

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
# (host, port) -> addresses as text; the default uses the event loop's getaddrinfo.
Resolver: TypeAlias = Callable[[str, int], Awaitable[Sequence[str]]]


class SSRFBlocked(JobyardError):
    """The destination is not allowed (private, loopback, link-local or metadata address)."""

    code = "ssrf_blocked"


class HostUnresolvable(JobyardError):
    """The host name did not resolve to any address."""

    code = "host_unresolvable"


def _table(
    rows: Iterable[tuple[str, str]],
) -> tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]:
    return tuple((ipaddress.ip_network(net), f"{label} ({net})") for net, label in rows)


# Most specific first, so the reason names the metadata endpoint rather than its /16.
_IPV4_DENY: Final = _table(
    [
        ("169.254.169.254/32", "cloud metadata endpoint"),
        ("100.100.100.200/32", "Alibaba Cloud metadata endpoint"),
        ("168.63.129.16/32", "Azure platform endpoint"),
        ("255.255.255.255/32", "broadcast"),
        ("0.0.0.0/8", "'this network'"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared address space (CGNAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
    ]
)
_IPV6_DENY: Final = _table(
    [
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fd00:ec2::254/128", "AWS metadata endpoint"),
        ("fc00::/7", "unique local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
        ("100::/64", "discard-only"),
        # Local-use NAT64 may embed IPv4 at any prefix length, so it cannot be unwrapped safely.
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("2001:2::/48", "benchmarking"),
        ("2001:10::/28", "ORCHID (deprecated)"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "SRv6 segment identifiers"),
    ]
)
# Refused whatever they embed, after the embedded address had its chance to give the reason.
_IPV6_DENY_AFTER_UNWRAP: Final = _table(
    [
        ("::/96", "IPv4-compatible (deprecated)"),
        ("::ffff:0:0:0/96", "IPv4-translated"),
        ("2001::/32", "Teredo tunnel"),
        # Anycast and protocol blocks (PCP, AMT, AS112, ORCHID); none is a webhook target.
        ("2001::/23", "IETF protocol assignments"),
    ]
)

_MAPPED: Final = ipaddress.IPv6Network("::ffff:0:0/96")
_TRANSLATED: Final = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR: Final = ipaddress.IPv6Network("2002::/16")
_TEREDO: Final = ipaddress.IPv6Network("2001::/32")
_LOW32: Final = 0xFFFFFFFF

BLOCKED_HOSTNAMES: Final = frozenset(
    {
        "localhost",
        "ip6-localhost",
        "ip6-loopback",
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
    }
)
# RFC 6761 reserves *.localhost for loopback; .internal is reserved for private use (ICANN 2024).
BLOCKED_SUFFIXES: Final = (".localhost", ".internal")

_HEX_PART: Final = re.compile(r"0[xX][0-9a-fA-F]*")
_OCTAL_PART: Final = re.compile(r"0[0-7]+")
_DECIMAL_PART: Final = re.compile(r"[1-9][0-9]*|0")
_MAX_HOST_LENGTH: Final = 253


def normalize_host(host: str) -> str:
    """Lower-case, without IPv6 brackets or one trailing root dot."""
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        return name[1:-1]
    return name[:-1] if name.endswith(".") else name


def _ipv4_part(part: str) -> int | None:
    # ASCII-only patterns: int() alone would accept "1_0", "+1" and non-ASCII digits.
    if _HEX_PART.fullmatch(part):
        return int(part[2:] or "0", 16)
    if _OCTAL_PART.fullmatch(part):
        return int(part, 8)
    if _DECIMAL_PART.fullmatch(part):
        return int(part)
    return None


def _parse_ipv4_spelling(host: str) -> ipaddress.IPv4Address | None:
    """inet_aton/WHATWG forms: 1-4 parts (decimal, 0-octal or 0x-hex); the last fills the rest."""
    parts = host.split(".")
    if len(parts) > 4 or "" in parts:
        return None
    values = [_ipv4_part(p) for p in parts]
    numbers = [v for v in values if v is not None]
    if len(numbers) != len(values):
        return None
    *head, last = numbers
    if any(v > 0xFF for v in head) or last >= 256 ** (4 - len(head)):
        return None
    value = last
    for i, v in enumerate(head):
        value |= v << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def parse_host_literal(host: str) -> IPAddress | None:
    """The IP address a URL host spells, in any form libc or a browser accepts; None for names."""
    name = normalize_host(host)
    if not name or len(name) > _MAX_HOST_LENGTH:
        return None
    if ":" in name:
        try:
            return ipaddress.IPv6Address(name)
        except ValueError:
            return None
    return _parse_ipv4_spelling(name)


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """IPv4 addresses an IPv6 address carries, with the name of the embedding."""
    n = int(addr)
    low = ipaddress.IPv4Address(n & _LOW32)
    if addr in _MAPPED:
        return [("IPv4-mapped", low)]
    if addr in _TRANSLATED:
        return [("IPv4-translated", low)]
    if addr in _COMPATIBLE and n > 1:  # :: and ::1 are themselves, not 0.0.0.0/0.0.0.1
        return [("IPv4-compatible", low)]
    if addr in _NAT64:
        return [("NAT64", low)]
    if addr in _SIX_TO_FOUR:
        return [("6to4", ipaddress.IPv4Address((n >> 80) & _LOW32))]
    if addr in _TEREDO:
        # RFC 4380: server in bits 32-63, client address stored bit-inverted in the low 32.
        server = ipaddress.IPv4Address((n >> 64) & _LOW32)
        return [("Teredo server", server), ("Teredo client", ipaddress.IPv4Address(~n & _LOW32))]
    return []


def _ipv4_reason(addr: ipaddress.IPv4Address) -> str | None:
    for net, reason in _IPV4_DENY:
        if addr in net:
            return reason
    if not addr.is_global:
        return "not globally reachable"
    return None


def is_forbidden(addr: IPAddress) -> str | None:
    """Why a job may not connect to `addr`, or None if it may."""
    if isinstance(addr, ipaddress.IPv4Address):
        return _ipv4_reason(addr)
    for net, reason in _IPV6_DENY:
        if addr in net:
            return reason
    embedded = _embedded_ipv4(addr)
    for kind, inner in embedded:
        inner_reason = _ipv4_reason(inner)
        if inner_reason is not None:
            return f"{kind} address embeds {inner}: {inner_reason}"
    for net, reason in _IPV6_DENY_AFTER_UNWRAP:
        if addr in net:
            return reason
    if embedded:
        # Mapped, NAT64 and 6to4 reach the embedded IPv4 host, which passed the IPv4 rules.
        return None
    if not addr.is_global:
        return "not globally reachable"
    return None


def hostname_reason(name: str) -> str | None:
    """Why a host name is refused before any lookup, or None."""
    if name in BLOCKED_HOSTNAMES or name.endswith(BLOCKED_SUFFIXES):
        return "reserved local or metadata host name"
    return None


async def system_resolver(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def _parse_resolved(host: str, raw: Iterable[str]) -> list[IPAddress]:
    addresses: list[IPAddress] = []
    for text in raw:
        try:
            addr = ipaddress.ip_address(text)
        except ValueError:
            raise SSRFBlocked(
                f"host {host!r} resolved to something that is not an IP address", host=host
            ) from None
        if addr not in addresses:
            addresses.append(addr)
    return addresses


async def resolve_and_check(
    host: str,
    port: int,
    resolver: Resolver | None = None,
    *,
    allowed: frozenset[IPAddress] = frozenset(),
) -> list[IPAddress]:
    """Every address `host` resolves to, or SSRFBlocked if ANY of them is forbidden.

    The caller must connect only to the returned addresses (never re-resolve), so a DNS answer
    that changes between check and connect cannot redirect the request. `allowed` exempts exact
    addresses from the address rules (tests use it to reach a loopback server).
    """
    name = normalize_host(host)
    if not name:
        raise SSRFBlocked("the URL has no host", host=host)
    name_reason = hostname_reason(name)
    if name_reason is not None:
        raise SSRFBlocked(f"host {name!r} is not allowed: {name_reason}", host=name)
    literal = parse_host_literal(name)
    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        try:
            raw = await (resolver or system_resolver)(name, port)
        except (OSError, UnicodeError) as exc:
            raise HostUnresolvable(f"host {name!r} did not resolve: {exc}", host=name) from None
        addresses = _parse_resolved(name, raw)
    if not addresses:
        raise HostUnresolvable(f"host {name!r} did not resolve to any address", host=name)
    for addr in addresses:
        reason = None if addr in allowed else is_forbidden(addr)
        if reason is not None:
            raise SSRFBlocked(
                f"host {name!r} resolves to {addr}, which is not allowed: {reason}",
                host=name,
                address=str(addr),
                reason=reason,
            )
    return addresses
