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

__all__ = ["ICRC16_NS", "MAX_DEPTH", "PayloadError", "from_xml", "to_xml", "too_deep"]

ICRC16_NS = "urn:tidings:icrc16"
_encode = msgspec.json.Encoder().encode


MAX_DEPTH = 64
"""Deepest nesting of elements a payload may have. slixmpp serializes an element by
recursion, so one nested a few thousand deep (a few KB) would raise RecursionError
wherever it is written out: when it is published, and in every push of it."""


class PayloadError(ValueError):
    """A payload that cannot be carried (too large, or nested too deeply)."""


def from_xml(children: list[ET.Element], max_bytes: int) -> dict[str, Any]:
    if any(too_deep(c, MAX_DEPTH) for c in children):
        raise PayloadError(f"the payload nests more than {MAX_DEPTH} elements deep")
    text = "".join(tostring(c) for c in children)
    if len(text.encode()) > max_bytes:
        raise PayloadError(f"the payload has more than {max_bytes} bytes")
    return {"Map": [["xml", {"Text": text}]]}


def to_xml(data: Any) -> list[ET.Element]:
    """The payload elements for an event's ICRC-16 data (already decoded wire form)."""
    xml = _xml_text(data)
    if xml is not None:
        try:
            elements = list(ET.fromstring(f"<r>{xml}</r>"))
        except ET.ParseError:
            pass  # published over HTTP as such, but not XML: carried as ICRC-16 below
        else:
            if not any(too_deep(e, MAX_DEPTH) for e in elements):
                return elements  # else (published over HTTP so) carried as ICRC-16 below
    el = ET.Element(f"{{{ICRC16_NS}}}icrc16")
    el.text = _encode(data).decode()
    return [el]


def too_deep(root: ET.Element, limit: int) -> bool:
    """Whether ``root`` nests more than ``limit`` elements deep (found without recursion)."""
    stack = [(root, 1)]
    while stack:
        el, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in el)
    return False


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
