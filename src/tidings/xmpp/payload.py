"""Event data between XML payloads and ICRC-16 values (docs/xmpp.md, "Payloads").

An XMPP publisher's payload (whatever is inside ``<publish/>`` or ``<item/>``) becomes
the ICRC-16 value ``{"Map": [["xml", {"Text": <the payload as XML text>}]]}``, and such a
value goes back out as that XML, untouched, as XEP-0021 §4.1 asks. Any other value (an
event published over HTTP) goes out as ``<icrc16 xmlns="urn:tidings:icrc16">`` holding
its JSON wire form, so nothing is lost either way.
"""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

import msgspec
from slixmpp.xmlstream import tostring

__all__ = ["ICRC16_NS", "PayloadError", "from_xml", "to_xml"]

ICRC16_NS = "urn:tidings:icrc16"
_encode = msgspec.json.Encoder().encode


class PayloadError(ValueError):
    """A payload that cannot be carried (too large)."""


def from_xml(children: list[ET.Element], max_bytes: int) -> dict[str, Any]:
    text = "".join(tostring(c) for c in children)
    if len(text.encode()) > max_bytes:
        raise PayloadError(f"the payload has more than {max_bytes} bytes")
    return {"Map": [["xml", {"Text": text}]]}


def to_xml(data: Any) -> list[ET.Element]:
    """The payload elements for an event's ICRC-16 data (already decoded wire form)."""
    xml = _xml_text(data)
    if xml is not None:
        try:
            return list(ET.fromstring(f"<r>{xml}</r>"))
        except ET.ParseError:
            pass  # published over HTTP as such, but not XML: carried as ICRC-16 below
    el = ET.Element(f"{{{ICRC16_NS}}}icrc16")
    el.text = _encode(data).decode()
    return [el]


def _xml_text(data: Any) -> str | None:
    if isinstance(data, dict) and list(data) == ["Map"]:
        pairs = data["Map"]
        if (
            isinstance(pairs, list) and len(pairs) == 1 and isinstance(pairs[0], list) and len(pairs[0]) == 2
            and pairs[0][0] == "xml" and isinstance(pairs[0][1], dict) and list(pairs[0][1]) == ["Text"]
            and isinstance(pairs[0][1]["Text"], str)
        ):
            return str(pairs[0][1]["Text"])
    return None
