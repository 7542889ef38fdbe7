"""XEP-0060 for today's clients, and service discovery (XEP-0030).

The component is a publish-subscribe service whose nodes are tidings namespaces, node
name = namespace (an XMPP entity's own namespaces included). Supported: discovery of the
service and its nodes, subscribe, unsubscribe, publish, and item notifications
(``<message><event><items><item id=eventId>``). docs/xmpp.md lists what is not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from xml.etree import ElementTree as ET

import msgspec

from ..core import ens
from ..core.wire import Event, SubscriptionRegistration
from .ens_face import own_subscriptions
from .payload import PayloadError, from_xml
from .stanzas import DISCO_INFO, DISCO_ITEMS, ENS, PING, PUBSUB, PUBSUB_EVENT, StanzaError, error_of_item

if TYPE_CHECKING:
    import slixmpp

    from .handler import Face, Handler

__all__ = ["HANDLERS", "notification"]

_MAX_ITEMS = 1000
_FEATURES = (DISCO_INFO, DISCO_ITEMS, PING, ENS, PUBSUB, f"{PUBSUB}#publish", f"{PUBSUB}#subscribe",
             f"{PUBSUB}#create-nodes")


def notification(
    x: slixmpp.ComponentXMPP, to: str, node: str, item_id: int, payload: list[ET.Element]
) -> slixmpp.Message:
    msg = x.make_message(mto=to, mtype="headline")
    event = ET.SubElement(msg.xml, f"{{{PUBSUB_EVENT}}}event")
    items = ET.SubElement(event, f"{{{PUBSUB_EVENT}}}items", {"node": node})
    item = ET.SubElement(items, f"{{{PUBSUB_EVENT}}}item", {"id": str(item_id)})
    item.extend(payload)
    return msg


async def disco_info(face: Face, iq: slixmpp.Iq, el: ET.Element) -> ET.Element:
    node = el.get("node")
    out = ET.Element(f"{{{DISCO_INFO}}}query", {"node": node} if node else {})
    if node:
        if node not in face.broker.orchestrator.publications:
            raise StanzaError("item-not-found", f"no node {node!r}")
        ET.SubElement(out, f"{{{DISCO_INFO}}}identity", {"category": "pubsub", "type": "leaf"})
    else:
        ET.SubElement(out, f"{{{DISCO_INFO}}}identity", {"category": "pubsub", "type": "service", "name": "tidings"})
    for f in _FEATURES:
        ET.SubElement(out, f"{{{DISCO_INFO}}}feature", {"var": f})
    return out


async def disco_items(face: Face, iq: slixmpp.Iq, el: ET.Element) -> ET.Element:
    out = ET.Element(f"{{{DISCO_ITEMS}}}query")
    if el.get("node"):
        return out  # leaf nodes: their items are not listed (no persistent items here)
    for ns in sorted(face.broker.orchestrator.publications)[:_MAX_ITEMS]:
        ET.SubElement(out, f"{{{DISCO_ITEMS}}}item", {"jid": face.domain, "node": ns, "name": ns})
    return out


async def ping(face: Face, iq: slixmpp.Iq, el: ET.Element) -> None:
    return None


async def pubsub(face: Face, iq: slixmpp.Iq, el: ET.Element) -> ET.Element | None:
    if iq["type"] != "set" or (len(el) != 1 and not (len(el) == 2 and el[1].tag == f"{{{PUBSUB}}}options")):
        raise StanzaError("feature-not-implemented", "served: set with subscribe, unsubscribe or publish")
    action = el[0]
    name = action.tag.rpartition("}")[2]
    node = action.get("node")
    if not node:
        raise StanzaError("bad-request", f"{name} needs a node")
    sender = iq["from"].full
    if name in ("subscribe", "unsubscribe"):
        target = action.get("jid") or sender
        try:
            same = ens.bare(target) == ens.bare(sender)
        except ValueError:
            same = False
        if not same:  # XEP-0060 §6.1.3.3: one may subscribe only oneself
            raise StanzaError("bad-request", "the jid must be the sender's own (invalid-jid)")
        return await (_subscribe if name == "subscribe" else _unsubscribe)(face, iq, node, target)
    if name == "publish":
        return await _publish(face, iq, action, node)
    raise StanzaError("feature-not-implemented", f"pubsub {name!r} is not served")


async def _subscribe(face: Face, iq: slixmpp.Iq, node: str, target: str) -> ET.Element:
    caller = await face.principal(iq["from"].full)
    if ens.owner_of(node) is not None:
        await face.entity_publication(node)
    endpoint = f"xmpp:{target}?pubsub"
    orch = face.broker.orchestrator
    subs = own_subscriptions(face, caller.name, node, endpoint)
    if subs:
        sub_id = subs[0]
    else:
        (res,) = await orch.register_subscriptions(caller, [SubscriptionRegistration(
            namespace=node, endpoint=endpoint, reliable=False,
            config=[("tidings:subscription:onError", {"Text": "deadletter"})],
        )])
        if res is None or res.Err is not msgspec.UNSET:
            raise error_of_item(res) if res is not None else StanzaError("internal-server-error")
        sub_id = int(res.Ok)
    out = ET.Element(f"{{{PUBSUB}}}pubsub")
    ET.SubElement(out, f"{{{PUBSUB}}}subscription", {
        "node": node, "jid": target, "subid": str(sub_id), "subscription": "subscribed",
    })
    return out


async def _unsubscribe(face: Face, iq: slixmpp.Iq, node: str, target: str) -> None:
    caller = await face.principal(iq["from"].full)
    endpoint = f"xmpp:{target}?pubsub"
    orch = face.broker.orchestrator
    ids = own_subscriptions(face, caller.name, node, endpoint)
    if not ids:
        raise StanzaError("unexpected-request" if node in orch.publications else "item-not-found",
                          f"not subscribed to {node!r}")
    await orch.delete_subscriptions(caller, ids)
    return None


async def _publish(face: Face, iq: slixmpp.Iq, action: ET.Element, node: str) -> ET.Element:
    caller = await face.principal(iq["from"].full)
    owner = ens.owner_of(node)
    if owner is not None:
        if owner != caller.name:
            raise StanzaError("forbidden", f"only {owner} publishes to {node!r}")
        await face.entity_publication(node)
    items = action.findall(f"{{{PUBSUB}}}item")
    if len(items) > 1:
        raise StanzaError("bad-request", "publish one item at a time")
    try:
        data = from_xml(list(items[0]) if items else [], face.max_payload)
    except PayloadError as e:
        raise StanzaError("not-acceptable", str(e)) from None
    # XEP-0060 §7.1.2: an item id the publisher gives names the item; here it is the
    # event's idempotency key, so a publish sent again is answered with the event stored.
    key = items[0].get("id") if items else None
    (res,) = await face.broker.broadcaster.publish(caller, [Event(namespace=node, data=data, idempotencyKey=key)])
    if res is None or res.Err is not msgspec.UNSET:
        raise error_of_item(res) if res is not None else StanzaError("internal-server-error")
    event_id = res.Ok[0] if isinstance(res.Ok, list) and res.Ok else res.Ok
    out = ET.Element(f"{{{PUBSUB}}}pubsub")
    pub = ET.SubElement(out, f"{{{PUBSUB}}}publish", {"node": node})
    ET.SubElement(pub, f"{{{PUBSUB}}}item", {"id": str(event_id)})
    return out


HANDLERS: dict[tuple[str, str], Handler] = {
    (DISCO_INFO, "query"): disco_info,
    (DISCO_ITEMS, "query"): disco_items,
    (PING, "ping"): ping,
    (PUBSUB, "pubsub"): pubsub,
}
