"""The pure rules of CloudEvents in (``core.cloudevents``) and of W3C Trace Context
(``core.tracecontext``), for whole classes of input (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core import cloudevents, tracecontext, values
from tidings.core.jsonview import json_view

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(("value", "valid"), [
    (PARENT, True),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", True),
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", True),  # a later version may add fields
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", False),  # version 00 may not
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", False),
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", False),  # uppercase
    ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", False),  # short trace id
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n", False),
    ("", False),
])
def test_traceparent(value: str, valid: bool) -> None:
    assert tracecontext.valid_traceparent(value) is valid


def test_tracestate_and_the_pair() -> None:
    assert tracecontext.valid_tracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
    assert tracecontext.valid_tracestate("a=1, ,b@vendor=2")
    assert not tracecontext.valid_tracestate("a=1,a=2")  # a key twice
    assert not tracecontext.valid_tracestate("UPPER=1")
    assert not tracecontext.valid_tracestate(",".join(f"k{i}=v" for i in range(33)))
    assert not tracecontext.valid_tracestate("a=" + "x" * 600)
    assert tracecontext.trace_context(PARENT, "a=1") == tracecontext.TraceContext(PARENT, "a=1")
    assert tracecontext.trace_context(PARENT, "bad state") == tracecontext.TraceContext(PARENT, None)
    assert tracecontext.trace_context("bad", "a=1") is None  # the state goes with its parent
    assert tracecontext.trace_context(None, "a=1") is None


@given(st.text(max_size=80), st.text(max_size=80))
def test_trace_context_takes_any_text(parent: str, state: str) -> None:
    got = tracecontext.trace_context(parent, state)
    assert got is None or tracecontext.valid_traceparent(got.traceparent)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300)
@given(_json)
def test_json_data_comes_back_as_it_went_in(data: Any) -> None:
    """Structured or binary, JSON data is stored as an ICRC-16 value whose JSON view (what
    a CloudEvents push carries) is the same JSON."""
    base = {"specversion": "1.0", "id": "1", "source": "s", "type": "t"}
    (structured,) = cloudevents.from_http(
        "ns", cloudevents.STRUCTURED, [], json.dumps({**base, "data": data}).encode(), max_events=1
    )
    binary_headers = [(b"ce-" + k.encode(), v.encode()) for k, v in base.items()]
    (binary,) = cloudevents.from_http("ns", "application/json", binary_headers, json.dumps(data).encode(),
                                      max_events=1)
    for event in (structured, binary):
        values.check(event.data)
        assert json_view(event.data) == data
    assert structured.data == binary.data


_header_names = st.sampled_from([b"ce-id", b"ce-source", b"ce-type", b"ce-specversion", b"ce-time", b"ce-x",
                                 b"CE-Subject", b"ce-", b"ce-a_b", b"content-type", b"traceparent", b"other"])
_header_values = st.sampled_from([b"1.0", b"s", b"", b"%", b"%ZZ", b"%FF", b"\xff", b"2026-01-01T00:00:00Z",
                                  b"2026-13-01T00:00:00Z", PARENT.encode()]) | st.binary(max_size=12)


@settings(max_examples=500)
@given(
    headers=st.lists(st.tuples(_header_names, _header_values), max_size=8),
    content_type=st.sampled_from([None, "application/json", "text/plain", "text/plain; charset=latin-1",
                                  cloudevents.STRUCTURED, cloudevents.BATCH, "application/cloudevents+xml", "x"]),
    body=st.binary(max_size=40) | st.builds(lambda v: json.dumps(v).encode(), _json),
)
def test_any_request_is_events_or_a_named_refusal(
    headers: list[tuple[bytes, bytes]], content_type: str | None, body: bytes
) -> None:
    """Whatever arrives: a list of well-formed events, or a ``CloudEventError`` with a
    4xx status; never another exception."""
    try:
        events = cloudevents.from_http("ns", content_type, headers, body, max_events=5)
    except cloudevents.CloudEventError as e:
        assert 400 <= e.status < 500 and str(e)
        return
    for e in events:
        values.check(e.data)
        for _, v in e.headers or []:
            values.check(v)
        keys = [k for k, _ in e.headers or []]
        assert {"cloudevents:id", "cloudevents:source", "cloudevents:type", "cloudevents:specversion"} <= set(keys)
        assert len(keys) == len(set(keys))


def test_bounds_are_named() -> None:
    base = [(b"ce-specversion", b"1.0"), (b"ce-source", b"s"), (b"ce-type", b"t")]
    with pytest.raises(cloudevents.CloudEventError, match="attribute 'id'") as e:
        cloudevents.from_http("ns", None, [*base, (b"ce-id", b"x" * 257)], b"", max_events=1)
    assert e.value.attribute == "id"
    with pytest.raises(cloudevents.CloudEventError) as e:
        cloudevents.from_http("ns", None, [*base, (b"x-pad", b"x" * 70_000)], b"", max_events=1)
    assert e.value.status == 431
    with pytest.raises(cloudevents.CloudEventError, match="at most 3 events"):
        cloudevents.from_http("ns", cloudevents.BATCH, [], b"[" + b",".join([b"{}"] * 4) + b"]", max_events=3)
