"""The one rule between XEP-0021 event JIDs and namespaces (core.ens), both ways."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core import ens
from tidings.core.namespaces import namespace_error

COMPONENT = "tidings.example.org"
_segment = st.from_regex(r"[A-Za-z0-9_:\-]{1,12}", fullmatch=True)
_part = st.from_regex(r"[A-Za-z0-9_\-]{0,12}", fullmatch=True)
_label = st.from_regex(r"[a-z0-9\-]{1,10}", fullmatch=True)


@given(st.lists(_segment, min_size=1, max_size=6).map(".".join))
def test_service_namespaces_round_trip(ns: str) -> None:
    if ns.startswith(ens.ENTITY_PREFIX) or namespace_error(ns):
        return
    jid = ens.event_jid(ns, COMPONENT)
    assert jid == f"{COMPONENT}/{ns}"
    assert ens.namespace_of(jid, COMPONENT) == ns
    assert ens.owner_of(ns) is None


@given(_part, st.lists(_label, min_size=1, max_size=4).map(".".join), _part)
def test_entity_jids_round_trip_and_are_owned_by_their_bare_jid(local: str, domain: str, resource: str) -> None:
    jid = (f"{local}@{domain}" if local else domain) + (f"/{resource}" if resource else "")
    if domain == COMPONENT:
        return
    ns = ens.namespace_of(jid, COMPONENT)
    assert namespace_error(ns) is None
    assert ens.event_jid(ns, COMPONENT) == jid
    assert ens.owner_of(ns) == ens.principal_of(jid) == "xmpp:" + (f"{local}@{domain}" if local else domain)


@pytest.mark.parametrize("jid", [
    "", "a b@example.org", "@example.org", "al+ice@example.org/x", "alice@example.org/re:s",
    "alice@exa_mple.org", f"{COMPONENT}/xmpp:x:y:z", f"{COMPONENT}/no..such", f"{COMPONENT}/",
    "alice@example.org/" + "x" * 300, "alice\x00@example.org",
])
def test_jids_that_name_no_event_are_refused_with_a_reason(jid: str) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        ens.namespace_of(jid, COMPONENT)


@pytest.mark.parametrize(("endpoint", "principal", "ok"), [
    ("xmpp:bob@example.org/phone?ens", "xmpp:bob@example.org", True),
    ("xmpp:bob@example.org?pubsub", "xmpp:bob@example.org", True),
    ("xmpp:bob@example.org/phone?ens", "xmpp:alice@example.org", False),   # someone else's address
    ("xmpp:bob@example.org/phone?ens", "alice", False),
    ("xmpp:bob@example.org/phone", "xmpp:bob@example.org", False),         # no flavour
    ("xmpp:bob@example.org?other", "xmpp:bob@example.org", False),
    ("xmpp:?ens", "xmpp:", False),
])
def test_only_the_entity_itself_may_be_an_xmpp_endpoint(endpoint: str, principal: str, ok: bool) -> None:
    assert (ens.endpoint_error(endpoint, principal) is None) is ok
