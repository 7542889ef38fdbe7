"""XML names and stanza errors shared by the ENS and pubsub faces."""

from __future__ import annotations

import copy
from xml.etree import ElementTree as ET

from msgspec import UnsetType

from ..core.wire import ItemResult

__all__ = ["ENS", "NOTIFICATION", "PUBSUB", "SHIM", "StanzaError", "error_of_item", "shim_headers"]

ENS = "http://xml.cataclysm.cx/jabber/ens/"
PUBSUB = "http://jabber.org/protocol/pubsub"
PUBSUB_EVENT = "http://jabber.org/protocol/pubsub#event"
DISCO_INFO = "http://jabber.org/protocol/disco#info"
DISCO_ITEMS = "http://jabber.org/protocol/disco#items"
PING = "urn:xmpp:ping"
STANZAS = "urn:ietf:params:xml:ns:xmpp-stanzas"
TIDINGS = "urn:tidings:subscription"
"""tidings' own additions to an ENS subscribe: ``<filter xmlns=TIDINGS>`` (docs/filters.md)."""
NOTIFICATION = "urn:tidings:notification"
"""The namespace of the attributes an ENS notification's ``<publish>`` carries beside the
payload (``eventId``, ``id``): what a subscriber needs to drop a repeat (docs/xmpp.md)."""
SHIM = "http://jabber.org/protocol/shim"
"""XEP-0131 Stanza Headers: how a pubsub notification message carries its event's W3C
trace context (``<header name="traceparent">``, docs/xmpp.md)."""

# XEP-0086: the legacy code XEP-0021 speaks in, for each condition, and back.
_CODES = {
    "bad-request": 400, "not-authorized": 401, "forbidden": 403, "item-not-found": 404,
    "not-allowed": 405, "not-acceptable": 406, "conflict": 409, "internal-server-error": 500,
    "resource-constraint": 500, "feature-not-implemented": 501, "service-unavailable": 503,
    "remote-server-timeout": 504, "recipient-unavailable": 404, "policy-violation": 403,
}
_CONDITIONS = {
    400: "bad-request", 401: "not-authorized", 403: "forbidden", 404: "item-not-found",
    405: "not-allowed", 406: "not-acceptable", 409: "conflict", 501: "feature-not-implemented",
    503: "service-unavailable", 504: "remote-server-timeout",
}
_TYPES = {
    "bad-request": "modify", "not-acceptable": "modify", "not-authorized": "auth", "forbidden": "auth",
    "item-not-found": "cancel", "not-allowed": "cancel", "conflict": "cancel", "feature-not-implemented": "cancel",
    "service-unavailable": "cancel", "remote-server-timeout": "wait", "resource-constraint": "wait",
    "internal-server-error": "wait",
}


class StanzaError(Exception):
    """Answer the request with this error (a condition of RFC 6120 §8.3.3, and its text)."""

    def __init__(self, condition: str, text: str = "", *, raw: ET.Element | None = None) -> None:
        super().__init__(text or condition)
        self.condition = condition
        self.text = text
        self.raw = raw
        """An error element to copy untouched (a publisher's denial, XEP-0021 §3.2)."""

    def element(self, ns: str) -> ET.Element:
        if self.raw is not None:
            el = copy.deepcopy(self.raw)
            el.tag = f"{{{ns}}}error"
            return el
        el = ET.Element(f"{{{ns}}}error", {
            "type": _TYPES.get(self.condition, "cancel"), "code": str(_CODES.get(self.condition, 500)),
        })
        ET.SubElement(el, f"{{{STANZAS}}}{self.condition}")
        if self.text:
            ET.SubElement(el, f"{{{STANZAS}}}text").text = self.text[:1024]
        return el


def code_of(error: ET.Element) -> int:
    """The legacy code of an error element: its ``code`` attribute, else its condition's."""
    code = error.get("code", "")
    if code.isdigit() and 100 <= int(code) < 600:
        return int(code)
    for child in error:
        name = child.tag.rpartition("}")[2]
        if name in _CODES:
            return _CODES[name]
    return 503


def error_of_item(result: ItemResult) -> StanzaError:
    """The stanza error for a tidings item error (``Err``)."""
    e = result.Err
    if isinstance(e, UnsetType):
        return StanzaError("internal-server-error")
    if not isinstance(e.GenericError, UnsetType):
        code, message = e.GenericError.error_code, e.GenericError.message
        if message.startswith("<error"):  # an XMPP publisher's own denial: copy it untouched
            try:
                return StanzaError("undefined-condition", raw=ET.fromstring(message))
            except ET.ParseError:
                pass
        return StanzaError(_CONDITIONS.get(code, "undefined-condition"), message)
    for field, condition in (
        ("Unauthorized", "forbidden"), ("ImproperConfig", "bad-request"), ("ImproperId", "bad-request"),
        ("NotFound", "item-not-found"), ("Busy", "resource-constraint"), ("GenericBatchError", "bad-request"),
    ):
        text = getattr(e, field)
        if isinstance(text, str):
            return StanzaError(condition, text)
    return StanzaError("undefined-condition")


def shim_headers(pairs: dict[str, str]) -> ET.Element:
    """``<headers xmlns=SHIM>`` holding one ``<header name=...>`` per pair (XEP-0131)."""
    el = ET.Element(f"{{{SHIM}}}headers")
    for name, value in pairs.items():
        ET.SubElement(el, f"{{{SHIM}}}header", {"name": name}).text = value
    return el
