"""Which network addresses the broker may call: the one outbound rule (docs/security.md).

Every URL a principal gives (subscription endpoints, publication authorisation URLs,
interchain targets) is checked against :class:`AddressPolicy`: at registration, and again
for every address its host name resolves to when a connection is made, so a name that
later resolves elsewhere (DNS rebinding) is still refused.

``ipaddress`` alone is not enough (REFERENCE §9): ``100.64/10`` is neither private nor
global, multicast reports global, IPv4-mapped, NAT64, 6to4, Teredo and IPv4-compatible
IPv6 addresses carry an IPv4 address that must be judged as such. So the address is first
reduced to the IPv4 address it stands for, then matched against explicit ranges, each
with the name of its rule, which is what a refusal reports.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["AddressPolicy", "IPAddress", "Refusal", "parse_allow_list", "rule_of"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_Net = ipaddress.IPv4Network | ipaddress.IPv6Network


def _nets(rule: str, *cidrs: str) -> list[tuple[_Net, str]]:
    return [(ipaddress.ip_network(c), rule) for c in cidrs]


# Ranges no principal's URL may reach by default, with the rule that names them. An
# address in none of them is global unicast.
_RANGES: list[tuple[_Net, str]] = [
    *_nets("unspecified", "0.0.0.0/8", "::/128"),
    *_nets("loopback", "127.0.0.0/8", "::1/128"),
    *_nets("private", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
    *_nets("unique_local", "fc00::/7"),
    *_nets("shared_cgnat", "100.64.0.0/10"),
    *_nets("link_local", "169.254.0.0/16", "fe80::/10"),  # 169.254.169.254: cloud metadata
    *_nets("site_local", "fec0::/10"),
    *_nets("multicast", "224.0.0.0/4", "ff00::/8"),
    # Prefixes that tunnel or translate to IPv4 in ways not reduced below: refused outright.
    *_nets("nat64", "64:ff9b::/96", "64:ff9b:1::/48"),
    *_nets("6to4", "2002::/16"),
    *_nets("teredo", "2001::/32"),
    *_nets("reserved", "240.0.0.0/4", "192.0.0.0/24", "192.88.99.0/24", "100::/64", "2001::/23"),
    *_nets("broadcast", "255.255.255.255/32"),
    *_nets("documentation", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32", "3fff::/20"),
    *_nets("benchmarking", "198.18.0.0/15", "2001:2::/48"),
]


def _ipv4_inside(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for: ``::ffff:a.b.c.d`` (mapped) and
    ``::a.b.c.d`` (the deprecated compatible form, which some stacks still route)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if int(ip) >> 32 == 0 and int(ip) > 1:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def rule_of(ip: IPAddress) -> str | None:
    """The rule that refuses ``ip`` by default, or None for a global unicast address."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _ipv4_inside(ip)
        if inner is not None:
            return rule_of(inner)
        if ip.scope_id:
            return "link_local"
    for net, rule in _RANGES:
        if ip.version == net.version and ip in net:
            return rule
    return None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an address may not be called: the rule, and the address it was judged by."""

    rule: str
    address: str

    def __str__(self) -> str:
        return f"{self.address} is refused by the outbound policy (rule: {self.rule})"


_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", re.ASCII)


def parse_allow_list(text: str) -> tuple[list[_Net], list[str]]:
    """``TIDINGS_OUTBOUND_ALLOW``: comma-separated CIDRs or addresses, and host names
    (``*.example.org`` for a domain's subdomains); ValueError on a malformed entry."""
    nets: list[_Net] = []
    hosts: list[str] = []
    for raw in text.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
            continue
        except ValueError:
            pass
        name = item[2:] if item.startswith("*.") else item
        labels = name.split(".")
        if not name or len(name) > 253 or not all(_LABEL.fullmatch(lbl) for lbl in labels):
            raise ValueError(f"outbound allow-list entry {raw.strip()!r} is neither a CIDR nor a host name")
        hosts.append(item)
    return nets, hosts


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """What the broker may call.

    ``restricted`` is the default on a server that listens on a non-loopback address:
    every range above is refused, and so are the server's own listen addresses. A server
    listening on loopback only serves this machine, and may call anything (the README's
    quickstart pushes to 127.0.0.1). ``allow`` opens ranges and host names explicitly.
    """

    restricted: bool
    allow_nets: tuple[_Net, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    own: frozenset[str] = field(default_factory=frozenset)
    """The server's own listen addresses (``ip`` or ``ip:port``)."""

    @classmethod
    def for_server(
        cls, listen_host: str, listen_port: int, allow: str, *, restricted: bool | None = None
    ) -> AddressPolicy:
        nets, hosts = parse_allow_list(allow)
        if restricted is None:
            restricted = not _is_loopback_host(listen_host)
        own = {listen_host.lower(), f"{listen_host.lower()}:{listen_port}"}
        return cls(restricted=restricted, allow_nets=tuple(nets), allow_hosts=tuple(hosts), own=frozenset(own))

    def host_allowed(self, host: str) -> bool:
        """An allow-listed host name: its addresses are not judged."""
        h = host.lower().rstrip(".")
        return any(h == a or (a.startswith("*.") and h.endswith(a[1:])) for a in self.allow_hosts)

    def refusal(self, ip: IPAddress, port: int | None = None) -> Refusal | None:
        if not self.restricted:
            return None
        if any(ip.version == n.version and ip in n for n in self.allow_nets):
            return None
        text = str(ip)
        if text in self.own or (port is not None and f"{text}:{port}" in self.own):
            return Refusal("own_address", text)
        rule = rule_of(ip)
        return Refusal(rule, text) if rule is not None else None

    def refusal_of_any(self, ips: Iterable[IPAddress], port: int | None = None) -> Refusal | None:
        """The first refusal among a host's addresses: one bad address refuses the name
        at registration (a rebinding name often answers with both)."""
        for ip in ips:
            r = self.refusal(ip, port)
            if r is not None:
                return r
        return None


def _is_loopback_host(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
