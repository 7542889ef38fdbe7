"""XML payloads and ICRC-16 values (``tidings.xmpp.payload``): nesting is bounded, so
that no payload raises RecursionError where slixmpp writes it out."""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slixmpp.xmlstream import tostring

from tidings.xmpp.payload import ICRC16_NS, MAX_DEPTH, PayloadError, from_xml, to_xml


def nested(depth: int) -> str:
    return "<a xmlns='urn:x'>" * depth + "</a>" * depth


@given(st.integers(1, MAX_DEPTH))
def test_a_payload_within_the_depth_round_trips(depth: int) -> None:
    data = from_xml([ET.fromstring(nested(depth))], 1 << 20)
    (back,) = to_xml(data)
    assert tostring(back) == data["Map"][0][1]["Text"]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 3000, 50_000])
def test_a_payload_nested_deeper_is_refused_when_published(depth: int) -> None:
    with pytest.raises(PayloadError, match="nests more than"):
        from_xml([ET.fromstring(nested(depth))], 1 << 30)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 3000])
def test_such_xml_published_over_http_is_pushed_as_icrc16(depth: int) -> None:
    # Any publisher over HTTP may send this text: it must still be pushable to XMPP subscribers.
    data = {"Map": [["xml", {"Text": nested(depth)}]]}
    (el,) = to_xml(data)
    assert el.tag == f"{{{ICRC16_NS}}}icrc16"
    assert tostring(el)  # written out without RecursionError
