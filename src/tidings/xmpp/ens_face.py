"""XEP-0021 requests: subscribe, unsubscribe and publish (docs/xmpp.md).

Each handler gets the component, the request and its child element, and returns the
child of the result (or raises :class:`StanzaError`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from xml.etree import ElementTree as ET

import msgspec

from ..core import ens
from ..core.wire import Event, SubscriptionRegistration
from .payload import PayloadError, from_xml
from .stanzas import ENS, TIDINGS, StanzaError, error_of_item

if TYPE_CHECKING:
    import slixmpp

    from .handler import Face, Handler

__all__ = ["HANDLERS"]


def _event_namespace(face: Face, jid: str | None) -> str:
    if not jid:
        raise StanzaError("bad-request", "the request needs a jid attribute naming the event")
    try:
        return ens.namespace_of(jid, face.domain)
    except ValueError as e:
        raise StanzaError("bad-request", str(e)) from None


def _endpoint(iq: slixmpp.Iq, flavour: str) -> str:
    return f"xmpp:{iq['from'].full}?{flavour}"


async def subscribe(face: Face, iq: slixmpp.Iq, el: ET.Element) -> ET.Element:
    if iq["type"] != "set":
        raise StanzaError("bad-request", "subscribe is an iq of type set")
    jid = el.get("jid")
    namespace = _event_namespace(face, jid)
    caller = await face.principal(iq["from"].full)
    await face.entity_publication(namespace)
    endpoint = _endpoint(iq, "ens")
    reliable = el.find(f"{{{ENS}}}reliable") is not None
    flt = el.find(f"{{{TIDINGS}}}filter")
    skip = _skip(el.find(f"{{{TIDINGS}}}skip"))
    info = el.find("{jabber:iq:auth}auth-info")
    if info is None:
        info = el.find(f"{{{ENS}}}auth-info")
    orch = face.broker.orchestrator
    if not own_subscriptions(face, caller.name, namespace, endpoint):
        (res,) = await orch.register_subscriptions(caller, [SubscriptionRegistration(
            namespace=namespace, endpoint=endpoint, reliable=reliable,
            authInfo=(info.text or "") if info is not None else None,
            filter=(flt.text or "") if flt is not None else None, skip=skip,
        )])
        if res is None or res.Err is not msgspec.UNSET:
            raise error_of_item(res) if res is not None else StanzaError("internal-server-error")
    return ET.Element(f"{{{ENS}}}subscribed", {"jid": jid or ""})


def _skip(el: ET.Element | None) -> list[int] | None:
    """``<skip xmlns="urn:tidings:subscription">mod offset</skip>`` (docs/semantics.md)."""
    if el is None:
        return None
    parts = (el.text or "").split()
    if not 1 <= len(parts) <= 2 or not all(p.isdigit() and len(p) <= 18 for p in parts):
        raise StanzaError("bad-request", "skip is one or two natural numbers: mod [offset]")
    return [int(p) for p in parts]


def own_subscriptions(face: Face, principal: str, namespace: str, endpoint: str) -> list[int]:
    """The ids of ``principal``'s subscriptions to ``namespace`` pushing to ``endpoint``."""
    return [s.id for s in face.broker.orchestrator.subscriptions.values()
            if s.subscriber == principal and s.namespace == namespace and s.endpoint == endpoint]


async def unsubscribe(face: Face, iq: slixmpp.Iq, el: ET.Element) -> ET.Element:
    if iq["type"] != "set":
        raise StanzaError("bad-request", "unsubscribe is an iq of type set")
    jid = el.get("jid")
    namespace = _event_namespace(face, jid)
    caller = await face.principal(iq["from"].full)
    endpoint = _endpoint(iq, "ens")
    ids = own_subscriptions(face, caller.name, namespace, endpoint)
    if ids:
        await face.broker.orchestrator.delete_subscriptions(caller, ids)
    return ET.Element(f"{{{ENS}}}unsubscribed", {"jid": jid or ""})


async def publish(face: Face, iq: slixmpp.Iq, el: ET.Element) -> ET.Element:
    """XEP-0021 §4.1: the event is the sender's own JID; tidings also takes a ``jid``
    attribute naming one of the service's namespaces, which the sender must be allowed
    to publish to as on HTTP."""
    if iq["type"] != "set":
        raise StanzaError("bad-request", "publish is an iq of type set")
    sender = iq["from"].full
    namespace = _event_namespace(face, el.get("jid") or sender)
    owner = ens.owner_of(namespace)
    caller = await face.principal(sender)
    if owner is not None and owner != caller.name:
        raise StanzaError("forbidden", f"only {owner} publishes the events of {namespace!r}")
    await face.entity_publication(namespace)
    try:
        data = from_xml(list(el), face.max_payload)
    except PayloadError as e:
        raise StanzaError("not-acceptable", str(e)) from None
    (res,) = await face.broker.broadcaster.publish(caller, [Event(namespace=namespace, data=data)])
    if res is None or res.Err is not msgspec.UNSET:
        raise error_of_item(res) if res is not None else StanzaError("internal-server-error")
    return ET.Element(f"{{{ENS}}}published")


HANDLERS: dict[tuple[str, str], Handler] = {
    (ENS, "subscribe"): subscribe,
    (ENS, "unsubscribe"): unsubscribe,
    (ENS, "publish"): publish,
}
