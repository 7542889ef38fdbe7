"""XMPP addresses of tidings things: the one mapping rule (docs/xmpp.md).

XEP-0021 names an event by a JID, tidings by a namespace. Two kinds of event JID map to
namespaces, each way and without loss:

* ``<component>/<namespace>``: an event space of the service itself (any namespace that
  does not start with ``xmpp:``, for example one registered over HTTP);
* ``[local@]domain[/resource]``: an XMPP entity's own events, as XEP-0021 §2.1 has it,
  map to ``xmpp:<domain>:<local>:<resource>`` (local and resource may be empty). The
  entity's bare JID owns that namespace.

A subscriber's XMPP endpoint is ``xmpp:<full JID>?ens`` (XEP-0021 notifications, iq) or
``xmpp:<full JID>?pubsub`` (XEP-0060 item notifications, message). An XMPP user acts
as the principal ``xmpp:<bare JID>``.
"""

from __future__ import annotations

import re

from .namespaces import namespace_error

__all__ = [
    "ENTITY_PREFIX",
    "Endpoint",
    "bare",
    "endpoint_error",
    "event_jid",
    "namespace_of",
    "owner_of",
    "parse_endpoint",
    "principal_of",
]

ENTITY_PREFIX = "xmpp:"
FLAVOURS = ("ens", "pubsub")
_PART = re.compile(r"[A-Za-z0-9_\-]*", re.ASCII)
_DOMAIN = re.compile(r"[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*", re.ASCII)
_MAX_JID = 1023  # RFC 7622: each part at most 1023 octets; we keep the whole below that


class Endpoint:
    """A parsed ``xmpp:`` subscription endpoint."""

    __slots__ = ("flavour", "jid")

    def __init__(self, jid: str, flavour: str) -> None:
        self.jid = jid
        self.flavour = flavour

    def __str__(self) -> str:
        return f"xmpp:{self.jid}?{self.flavour}"


def split_jid(jid: str) -> tuple[str, str, str]:
    """``(local, domain, resource)``; raises ValueError when it is no JID at all."""
    if not jid or len(jid) > _MAX_JID or any(c.isspace() or ord(c) < 32 for c in jid):
        raise ValueError(f"{jid!r} is not a JID")
    rest, _, resource = jid.partition("/")
    local, at, domain = rest.rpartition("@")
    if not domain or (at and not local):
        raise ValueError(f"{jid!r} is not a JID")
    return local, domain.lower(), resource


def bare(jid: str) -> str:
    local, domain, _ = split_jid(jid)
    return f"{local}@{domain}" if local else domain


def principal_of(jid: str) -> str:
    """The principal an XMPP entity acts as: ``xmpp:`` and its bare JID."""
    return ENTITY_PREFIX + bare(jid)


def namespace_of(jid: str, component: str) -> str:
    """The namespace an event JID names; ValueError with the reason if none."""
    local, domain, resource = split_jid(jid)
    if domain == component.lower() and not local:
        if resource.startswith(ENTITY_PREFIX):
            raise ValueError(f"{jid!r}: a service event JID's resource must not start with {ENTITY_PREFIX!r}")
        problem = namespace_error(resource)
        if problem:
            raise ValueError(f"{jid!r}: {problem}")
        return resource
    if not _DOMAIN.fullmatch(domain) or not _PART.fullmatch(local) or not _PART.fullmatch(resource):
        raise ValueError(
            f"{jid!r} cannot name a tidings event: its local part and resource may hold only "
            "letters, digits, '_' and '-', its domain only letters, digits, '-' and dots"
        )
    ns = f"{ENTITY_PREFIX}{domain}:{local}:{resource}"
    problem = namespace_error(ns)
    if problem:
        raise ValueError(f"{jid!r}: {problem}")
    return ns


def event_jid(namespace: str, component: str) -> str:
    """The event JID of a namespace: the inverse of :func:`namespace_of`."""
    if not namespace.startswith(ENTITY_PREFIX):
        return f"{component}/{namespace}"
    parts = namespace[len(ENTITY_PREFIX):].split(":")
    if len(parts) != 3:
        raise ValueError(f"{namespace!r} is not an XMPP entity's namespace")
    domain, local, resource = parts
    jid = f"{local}@{domain}" if local else domain
    return f"{jid}/{resource}" if resource else jid


def owner_of(namespace: str) -> str | None:
    """The principal that owns an XMPP entity's namespace (None for the service's own)."""
    if not namespace.startswith(ENTITY_PREFIX):
        return None
    parts = namespace[len(ENTITY_PREFIX):].split(":")
    if len(parts) != 3 or not parts[0]:
        return None
    domain, local = parts[0], parts[1]
    return ENTITY_PREFIX + (f"{local}@{domain}" if local else domain)


def parse_endpoint(endpoint: str) -> Endpoint:
    """``xmpp:<full JID>?ens|pubsub``; ValueError with the reason otherwise."""
    if not endpoint.startswith(ENTITY_PREFIX):
        raise ValueError(f"{endpoint!r} is not an xmpp: endpoint")
    jid, q, flavour = endpoint[len(ENTITY_PREFIX):].partition("?")
    if not q or flavour not in FLAVOURS:
        raise ValueError(f"xmpp endpoint {endpoint!r} must end in ?ens or ?pubsub")
    split_jid(jid)
    return Endpoint(jid, flavour)


def endpoint_error(endpoint: str, principal: str) -> str | None:
    """Why ``principal`` may not have notifications sent to this ``xmpp:`` endpoint.

    Only the entity itself may: otherwise any principal could make the service send
    stanzas to any address."""
    try:
        ep = parse_endpoint(endpoint)
    except ValueError as e:
        return str(e)
    if principal_of(ep.jid) != principal:
        return f"only {principal_of(ep.jid)} may subscribe with the endpoint {endpoint!r}"
    return None
