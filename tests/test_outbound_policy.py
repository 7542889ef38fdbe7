"""The outbound policy (core.netpolicy, tidings.outbound): every address class, DNS
rebinding, redirects, bounded answers, short failure codes (docs/security.md)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.netpolicy import AddressPolicy, parse_allow_list, rule_of
from tidings.outbound import Outbound, url_syntax_problem

from .conftest import free_port, read_body, respond

RESTRICTED = AddressPolicy(restricted=True)

# (a CIDR, the rule that refuses every address in it)
DENIED = [
    ("0.0.0.0/8", "unspecified"), ("127.0.0.0/8", "loopback"), ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"), ("192.168.0.0/16", "private"), ("100.64.0.0/10", "shared_cgnat"),
    ("169.254.0.0/16", "link_local"), ("224.0.0.0/4", "multicast"), ("240.0.0.0/4", "reserved"),
    ("192.0.2.0/24", "documentation"), ("198.18.0.0/15", "benchmarking"), ("::1/128", "loopback"),
    ("fc00::/7", "unique_local"), ("fe80::/10", "link_local"), ("fec0::/10", "site_local"),
    ("ff00::/8", "multicast"), ("64:ff9b::/96", "nat64"), ("64:ff9b:1::/48", "nat64"), ("2002::/16", "6to4"),
    ("2001::/32", "teredo"), ("2001:db8::/32", "documentation"),
]


@st.composite
def in_net(draw: Any, cidr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    net = ipaddress.ip_network(cidr)
    return net[draw(st.integers(0, net.num_addresses - 1))]


@pytest.mark.parametrize(("cidr", "rule"), DENIED)
@given(data=st.data())
def test_every_address_of_a_refused_range_is_refused_with_its_rule(cidr: str, rule: str, data: Any) -> None:
    ip = data.draw(in_net(cidr))
    refusal = RESTRICTED.refusal(ip)
    assert refusal is not None and refusal.rule == rule, (ip, refusal)


@pytest.mark.parametrize("cidr", ["10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "192.168.0.0/16", "100.64.0.0/10"])
@given(data=st.data())
def test_ipv6_forms_of_a_refused_ipv4_address_are_refused_as_it(cidr: str, data: Any) -> None:
    v4 = data.draw(in_net(cidr))
    mapped = ipaddress.IPv6Address(f"::ffff:{v4}")
    compatible = ipaddress.IPv6Address(int(v4))
    assert rule_of(mapped) == rule_of(v4) == rule_of(compatible)
    assert RESTRICTED.refusal(mapped) is not None and RESTRICTED.refusal(compatible) is not None


@pytest.mark.parametrize("ip", ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "2a00:1450:4001::1"])
def test_global_unicast_is_allowed(ip: str) -> None:
    assert RESTRICTED.refusal(ipaddress.ip_address(ip)) is None


def test_the_allow_list_opens_ranges_and_hosts_and_nothing_else() -> None:
    nets, hosts = parse_allow_list("10.1.0.0/16, 192.168.5.7 ,hooks.internal,*.corp.example")
    policy = AddressPolicy(restricted=True, allow_nets=tuple(nets), allow_hosts=tuple(hosts))
    assert policy.refusal(ipaddress.ip_address("10.1.200.3")) is None
    assert policy.refusal(ipaddress.ip_address("192.168.5.7")) is None
    assert policy.refusal(ipaddress.ip_address("10.2.0.1")) is not None
    assert policy.host_allowed("hooks.internal") and policy.host_allowed("a.b.corp.example")
    assert not policy.host_allowed("corp.example.evil.org") and not policy.host_allowed("xhooks.internal")
    for bad in ("not a host", "10.0.0.0/33", "-x-", "a..b"):
        with pytest.raises(ValueError):
            parse_allow_list(bad)


def test_a_server_on_a_network_address_is_restricted_and_refuses_its_own_address() -> None:
    assert not AddressPolicy.for_server("127.0.0.1", 8072, "").restricted
    assert not AddressPolicy.for_server("localhost", 8072, "").restricted
    assert not AddressPolicy.for_server("::1", 8072, "").restricted
    on_net = AddressPolicy.for_server("203.0.114.9", 8072, "")  # a global address
    assert on_net.restricted
    own = on_net.refusal(ipaddress.ip_address("203.0.114.9"), 8072)
    assert own is not None and own.rule == "own_address"
    assert AddressPolicy.for_server("0.0.0.0", 8072, "").restricted


@pytest.mark.parametrize("url", [
    "http://[::1", "http://[zz::]/", "http://host:99999/", "ftp://example.org/", "http:///path", "http://",
    "http://exa mple.org/", "http://example.org:0/", "http://" + "a" * 3000 + ".org/", "javascript:alert(1)",
    "http://example.org/\r\nX-Injected: 1",
])
def test_malformed_urls_get_a_reason_never_an_exception(url: str) -> None:
    problem = url_syntax_problem(url)
    assert problem and isinstance(problem, str)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/", "http://localhost:9/", "http://api.localhost/", "http://10.0.0.7/",
    "http://[::ffff:127.0.0.1]/", "http://[::ffff:a9fe:a9fe]/", "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1%25eth0]/", "http://0.0.0.0:8072/", "http://[::]/", "https://[64:ff9b::a00:1]/",
    "http://2130706433/", "http://0x7f000001/",
])
async def test_registration_refuses_literal_and_special_hosts_naming_the_rule(url: str) -> None:
    async with Outbound(RESTRICTED) as out:
        problem = await out.registration_problem(url, "endpoint")
        # Numeric host forms some resolvers accept (2130706433 = 127.0.0.1) never resolve
        # to anything else here, and are refused at connect time if they do.
        if problem is None:
            got = await out.post(url, b"{}", {}, timeout_s=2, max_bytes=100)
            assert got.code in ("blocked_address", "dns_failure", "connect_error"), got
            return
        assert "rule:" in problem and "TIDINGS_OUTBOUND_ALLOW" in problem


class _FakeDNS:
    """A name service that answers every name with one address (a rebinding attacker's)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[dict[str, Any]]:
        self.asked.append(host)
        return [{"hostname": host, "host": self.address, "port": port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


class _Recorder:
    def __init__(self, status: int = 200, body: bytes = b"[]", headers: list[tuple[str, str]] | None = None,
                 delay: float = 0.0, chunks: int = 0) -> None:
        self.hits = 0
        self.status, self.body, self.headers, self.delay, self.chunks = status, body, headers or [], delay, chunks

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await read_body(receive)
        self.hits += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.chunks:  # an endless (here: very long) answer
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for _ in range(self.chunks):
                await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        await respond(send, self.status, self.body, self.headers)


async def test_a_name_that_resolves_to_a_refused_address_at_connect_time_is_not_called(endpoints: Any) -> None:
    victim = _Recorder()
    ep = await endpoints(victim)
    dns = _FakeDNS("127.0.0.1")
    async with Outbound(RESTRICTED, resolver=dns) as out:
        # Registration saw a public address (or none); the connection resolves to loopback.
        got = await out.post(f"http://rebind.example:{ep.port}/", b"{}", {}, timeout_s=3, max_bytes=100)
    assert got.code == "blocked_address" and got.status is None
    assert dns.asked == ["rebind.example"] and victim.hits == 0


async def test_an_allow_listed_host_is_called_whatever_it_resolves_to(endpoints: Any) -> None:
    target = _Recorder()
    ep = await endpoints(target)
    policy = AddressPolicy(restricted=True, allow_hosts=("hooks.internal",))
    async with Outbound(policy, resolver=_FakeDNS("127.0.0.1")) as out:
        got = await out.post(f"http://hooks.internal:{ep.port}/", b"{}", {}, timeout_s=3, max_bytes=100)
    assert got.code == "ok" and target.hits == 1


async def test_redirects_are_not_followed(endpoints: Any) -> None:
    inner = _Recorder()
    inner_ep = await endpoints(inner)
    outer = _Recorder(302, b"", [("location", inner_ep.url)])
    outer_ep = await endpoints(outer)
    async with Outbound(AddressPolicy(restricted=False)) as out:
        got = await out.post(outer_ep.url, b"{}", {}, timeout_s=3, max_bytes=100)
    assert (got.code, outer.hits, inner.hits) == ("http_302", 1, 0)


async def test_answers_are_read_up_to_the_bound_and_failures_are_short_codes(endpoints: Any) -> None:
    huge = await endpoints(_Recorder(chunks=2000))  # 128 MiB if it were all read
    slow = await endpoints(_Recorder(delay=5))
    async with Outbound(AddressPolicy(restricted=False)) as out:
        got = await out.post(huge.url, b"{}", {}, timeout_s=10, max_bytes=4096)
        assert got.code == "ok" and got.truncated and len(got.body) == 4096
        got = await out.post(slow.url, b"{}", {}, timeout_s=0.5, max_bytes=4096)
        assert got.code == "timeout" and got.status is None
        got = await out.post(f"http://127.0.0.1:{free_port()}/", b"{}", {}, timeout_s=2, max_bytes=4096)
        assert got.code == "connect_refused"
        got = await out.post("http://no-such-host.invalid/", b"{}", {}, timeout_s=2, max_bytes=4096)
        assert got.code in ("dns_failure", "timeout")
