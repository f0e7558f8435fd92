"""The SSRF address policy: literals in every spelling, the deny table, embedded IPv4, resolution.

The forbidden networks below are written out here, independently of the module's table, so
dropping a range (or an unwrap) from `ssrf.py` makes these tests fail.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobyard.worker.handlers.ssrf import (
    HostUnresolvable,
    IPAddress,
    SSRFBlocked,
    is_forbidden,
    parse_host_literal,
    resolve_and_check,
    system_resolver,
)

FORBIDDEN_V4 = [
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
]
FORBIDDEN_V6 = [
    ipaddress.IPv6Network(n)
    for n in (
        "::/128",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
        "64:ff9b:1::/48",
        "2001:db8::/32",
    )
]
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8",
    "2002:808:808::1",
    "64:ff9b::808:808",
]


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


class FakeResolver:
    """A resolver that answers from a table and records every lookup."""

    def __init__(self, answers: dict[str, Sequence[str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append((host, port))
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.answers[host]


# --- literals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),  # decimal
        ("0177.0.0.1", "127.0.0.1"),  # octal
        ("0x7f.0.0.1", "127.0.0.1"),  # hex part
        ("0X7F.0.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),  # hex whole
        ("017700000001", "127.0.0.1"),  # octal whole
        ("127.1", "127.0.0.1"),  # short form: last part fills 3 bytes
        ("127.0.1", "127.0.0.1"),  # short form: last part fills 2 bytes
        ("0x7f.1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),  # trailing root dot
        ("0", "0.0.0.0"),
        ("169.254.43518", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("[::FFFF:7F00:1]", "::ffff:7f00:1"),
        ("[fe80::1%25eth0]", "fe80::1%25eth0"),
    ],
)
def test_parse_host_literal_reads_every_spelling(spelling: str, expected: str) -> None:
    assert parse_host_literal(spelling) == ip(expected)


@pytest.mark.parametrize(
    "host",
    [
        "example.com",
        "evil.example",
        "1.2.3.4.5",  # too many parts: a name, not an address
        "256.0.0.1",  # a non-last part over 255
        "1.2.3.256",
        "127.16777216",  # last part too big for its 3 bytes
        "08.0.0.1",  # 8 is not an octal digit
        "0x7g.0.0.1",
        "1..1",
        "1_0.0.0.1",  # int() would accept the underscore
        "+1.0.0.1",
        "١٢٧.0.0.1",  # non-ASCII digits int() would accept
        "",
        "[]",
        "[not-v6]",
        "1" * 300,
    ],
)
def test_parse_host_literal_returns_none_for_names(host: str) -> None:
    assert parse_host_literal(host) is None


def _spell(value: int, parts: int, radices: list[str]) -> str:
    """`value` written as inet_aton would read it with `parts` parts in the given radices."""
    widths = [1] * (parts - 1) + [4 - (parts - 1)]
    numbers = []
    shift = 32
    for width in widths:
        shift -= 8 * width
        numbers.append((value >> shift) & ((1 << (8 * width)) - 1))
    out = []
    for number, radix in zip(numbers, radices, strict=False):
        if radix == "hex":
            out.append(hex(number))
        elif radix == "oct":
            out.append("0" + format(number, "o"))
        else:
            out.append(str(number))
    return ".".join(out)


forbidden_v4_addresses = st.sampled_from(FORBIDDEN_V4).flatmap(
    lambda net: st.integers(int(net.network_address), int(net.broadcast_address)).map(
        ipaddress.IPv4Address
    )
)
forbidden_v6_addresses = st.sampled_from(FORBIDDEN_V6).flatmap(
    lambda net: st.integers(int(net.network_address), int(net.broadcast_address)).map(
        ipaddress.IPv6Address
    )
)


@given(
    addr=forbidden_v4_addresses,
    parts=st.integers(1, 4),
    radices=st.lists(st.sampled_from(["dec", "oct", "hex"]), min_size=4, max_size=4),
)
def test_any_spelling_of_a_forbidden_ipv4_is_read_like_libc_and_refused(
    addr: ipaddress.IPv4Address, parts: int, radices: list[str]
) -> None:
    spelling = _spell(int(addr), parts, radices)
    # The same reading glibc's inet_aton (and so getaddrinfo) gives the spelling.
    assert ipaddress.IPv4Address(socket.inet_aton(spelling)) == addr
    assert parse_host_literal(spelling) == addr
    assert is_forbidden(addr) is not None


# --- the deny table ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason_part"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.0.0.1", "private"),
        ("10.255.255.255", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "cloud metadata"),
        ("169.254.0.1", "link-local"),
        ("0.0.0.0", "this network"),
        ("0.1.2.3", "this network"),
        ("100.64.0.1", "CGNAT"),
        ("100.100.100.200", "metadata"),
        ("192.0.0.9", "IETF protocol"),  # Python's is_global calls this global
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("224.0.0.1", "multicast"),  # Python's is_global calls this global
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fc00::1", "unique local"),
        ("fd12:3456::1", "unique local"),
        ("fd00:ec2::254", "AWS metadata"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("febf::1", "link-local"),
        ("fec0::1", "site-local"),  # Python's is_global calls this global
        ("ff02::1", "multicast"),  # Python's is_global calls this global
        ("ff0e::1", "multicast"),
        ("64:ff9b:1::a00:1", "local-use NAT64"),
        ("2001:db8::1", "documentation"),
        ("2001:4:112::1", "IETF protocol"),
        ("2001:20::1", "IETF protocol"),
    ],
)
def test_is_forbidden_refuses_listed_range(address: str, reason_part: str) -> None:
    reason = is_forbidden(ip(address))
    assert reason is not None
    assert reason_part in reason


@pytest.mark.parametrize(
    ("address", "embedded"),
    [
        ("::ffff:127.0.0.1", "127.0.0.1"),  # IPv4-mapped
        ("::ffff:10.1.2.3", "10.1.2.3"),
        ("::ffff:169.254.169.254", "169.254.169.254"),
        ("::ffff:224.0.0.1", "224.0.0.1"),  # Python's is_global calls this global
        ("::127.0.0.1", "127.0.0.1"),  # IPv4-compatible, Python: global
        ("::ffff:0:127.0.0.1", "127.0.0.1"),  # IPv4-translated
        ("2002:7f00:1::", "127.0.0.1"),  # 6to4, Python: global
        ("2002:a9fe:a9fe:1:2:3:4:5", "169.254.169.254"),
        ("64:ff9b::7f00:1", "127.0.0.1"),  # NAT64, Python: global
        ("64:ff9b::10.0.0.1", "10.0.0.1"),
        ("2001:0:7f00:1::", "127.0.0.1"),  # Teredo server 127.0.0.1
        ("2001:0:808:808::80ff:fffe", "127.0.0.1"),  # Teredo client stored inverted
    ],
)
def test_is_forbidden_unwraps_embedded_ipv4(address: str, embedded: str) -> None:
    reason = is_forbidden(ip(address))
    assert reason is not None
    assert f"embeds {embedded}" in reason


@pytest.mark.parametrize("address", PUBLIC)
def test_is_forbidden_allows_public_addresses(address: str) -> None:
    assert is_forbidden(ip(address)) is None


@pytest.mark.parametrize("address", ["::8.8.8.8", "::ffff:0:8.8.8.8", "2001:0:808:808::f7f7:fbfb"])
def test_is_forbidden_refuses_deprecated_tunnels_even_with_public_inside(address: str) -> None:
    assert is_forbidden(ip(address)) is not None


@given(addr=forbidden_v4_addresses)
def test_any_address_in_a_forbidden_ipv4_network_is_refused(addr: ipaddress.IPv4Address) -> None:
    assert is_forbidden(addr) is not None


@given(addr=forbidden_v6_addresses)
def test_any_address_in_a_forbidden_ipv6_network_is_refused(addr: ipaddress.IPv6Address) -> None:
    assert is_forbidden(addr) is not None


def _embed(v4: int, form: str, noise: int) -> ipaddress.IPv6Address:
    if form == "mapped":
        return ipaddress.IPv6Address((0xFFFF << 32) | v4)
    if form == "translated":
        return ipaddress.IPv6Address((0xFFFF << 48) | v4)
    if form == "compatible":
        return ipaddress.IPv6Address(v4)
    if form == "nat64":
        return ipaddress.IPv6Address((0x64FF9B << 96) | v4)
    if form == "6to4":
        return ipaddress.IPv6Address((0x2002 << 112) | (v4 << 80) | (noise & ((1 << 80) - 1)))
    if form == "teredo-server":
        return ipaddress.IPv6Address((0x20010000 << 96) | (v4 << 64) | (noise & ((1 << 64) - 1)))
    assert form == "teredo-client"
    return ipaddress.IPv6Address(
        (0x20010000 << 96) | ((noise & 0xFFFF_FFFF) << 64) | (~v4 & 0xFFFF_FFFF)
    )


@given(
    addr=forbidden_v4_addresses,
    form=st.sampled_from(
        ["mapped", "translated", "compatible", "nat64", "6to4", "teredo-server", "teredo-client"]
    ),
    noise=st.integers(0, (1 << 80) - 1),
)
def test_any_forbidden_ipv4_wrapped_in_ipv6_is_refused(
    addr: ipaddress.IPv4Address, form: str, noise: int
) -> None:
    assert is_forbidden(_embed(int(addr), form, noise)) is not None


# --- resolve_and_check ---------------------------------------------------------------------------


async def test_resolve_and_check_refuses_a_name_resolving_to_loopback() -> None:
    resolver = FakeResolver({"evil.example": ["127.0.0.1"]})
    with pytest.raises(SSRFBlocked) as caught:
        await resolve_and_check("evil.example", 80, resolver)
    assert caught.value.code == "ssrf_blocked"
    assert "127.0.0.1" in caught.value.message
    assert resolver.calls == [("evil.example", 80)]


async def test_resolve_and_check_refuses_if_any_resolved_address_is_forbidden() -> None:
    resolver = FakeResolver({"mixed.example": ["93.184.216.34", "10.0.0.7"]})
    with pytest.raises(SSRFBlocked, match=r"10\.0\.0\.7"):
        await resolve_and_check("mixed.example", 443, resolver)


async def test_resolve_and_check_returns_every_checked_address_once() -> None:
    resolver = FakeResolver(
        {"good.example": ["93.184.216.34", "2606:2800:220:1::1", "93.184.216.34"]}
    )
    assert await resolve_and_check("good.example", 443, resolver) == [
        ip("93.184.216.34"),
        ip("2606:2800:220:1::1"),
    ]


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST",
        "localhost.",
        "app.localhost",
        "metadata.google.internal",
        "x.internal",
        "metadata",
    ],
)
async def test_resolve_and_check_refuses_local_names_without_resolving(host: str) -> None:
    resolver = FakeResolver({host: ["93.184.216.34"]})
    with pytest.raises(SSRFBlocked, match="host name"):
        await resolve_and_check(host, 80, resolver)
    assert resolver.calls == []


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "127.1", "[::1]", "::ffff:127.0.0.1"],
)
async def test_resolve_and_check_refuses_literals_without_resolving(host: str) -> None:
    resolver = FakeResolver({})
    with pytest.raises(SSRFBlocked):
        await resolve_and_check(host, 80, resolver)
    assert resolver.calls == []


async def test_resolve_and_check_refuses_the_real_localhost_with_the_system_resolver() -> None:
    with pytest.raises(SSRFBlocked):
        await resolve_and_check("localhost", 80)


async def test_system_resolver_answers_of_localhost_are_all_forbidden() -> None:
    """The address rules hold on their own for what the real resolver says localhost is."""
    answers = await system_resolver("localhost", 80)
    assert answers
    assert all(is_forbidden(ip(a)) is not None for a in answers)


async def test_resolve_and_check_allowed_set_exempts_only_those_addresses() -> None:
    resolver = FakeResolver(
        {"app.example": ["127.0.0.1"], "two.example": ["127.0.0.1", "127.0.0.2"]}
    )
    allowed = frozenset({ip("127.0.0.1")})
    assert await resolve_and_check("app.example", 80, resolver, allowed=allowed) == [
        ip("127.0.0.1")
    ]
    with pytest.raises(SSRFBlocked, match=r"127\.0\.0\.2"):
        await resolve_and_check("two.example", 80, resolver, allowed=allowed)


async def test_resolve_and_check_reports_unresolvable_names() -> None:
    with pytest.raises(HostUnresolvable) as caught:
        await resolve_and_check("nowhere.example", 80, FakeResolver({}))
    assert caught.value.code == "host_unresolvable"
    with pytest.raises(HostUnresolvable):
        await resolve_and_check("empty.example", 80, FakeResolver({"empty.example": []}))


async def test_resolve_and_check_refuses_a_resolver_answer_that_is_not_an_address() -> None:
    with pytest.raises(SSRFBlocked, match="not an IP address"):
        await resolve_and_check("odd.example", 80, FakeResolver({"odd.example": ["0x7f.1"]}))
