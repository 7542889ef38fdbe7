"""The pure rules of CloudEvents in (``core.cloudevents``) and of W3C Trace Context
(``core.tracecontext``), for whole classes of input (hypothesis)."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core import cloudevents, cloudevents_push, tracecontext, values
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


# -- out: core.cloudevents_push ----------------------------------------------------------


@given(st.integers(0, 2**63 - 1))
def test_rfc3339_is_the_calendar(ns: int) -> None:
    from datetime import UTC, datetime, timedelta

    got = cloudevents_push.rfc3339(ns)
    seconds, frac = divmod(ns, 10**9)
    want = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    assert got == want + (f".{frac:09d}" if frac else "") + "Z"


def _note(data: Any, headers: list[Any], note_id: int = 7) -> cloudevents_push.Note:
    return cloudevents_push.Note(note_id, 3, "ns", 1_700_000_000_000_000_001, json.dumps(data).encode(),
                                 json.dumps(headers).encode())


_wire = st.recursive(
    st.builds(lambda n: {"Nat": n}, st.integers(0, 2**70)) | st.builds(lambda t: {"Text": t}, st.text(max_size=8))
    | st.builds(lambda b: {"Bool": b}, st.booleans()) | st.builds(lambda n: {"Int": n}, st.integers(-(2**40), 0))
    | st.builds(lambda b: {"Blob": base64.b64encode(b).decode()}, st.binary(max_size=4))
    | st.just({"Option": None}) | st.builds(lambda p: {"Principal": p}, st.just("aaaaa-aa")),
    lambda inner: st.builds(lambda xs: {"Array": xs}, st.lists(inner, max_size=3))
    | st.builds(lambda kv: {"Map": [[k, v] for k, v in kv.items()]}, st.dictionaries(st.text(max_size=3), inner,
                                                                                    max_size=3)),
    max_leaves=6,
)
_keys = st.sampled_from(["cloudevents:id", "cloudevents:source", "cloudevents:type", "cloudevents:specversion",
                         "cloudevents:time", "cloudevents:datacontenttype", "cloudevents:x", "cloudevents:Bad Name",
                         "cloudevents:data:absent", "traceparent", "tracestate", "other"])


@settings(max_examples=300)
@given(data=_wire, headers=st.lists(st.tuples(_keys, _wire | st.builds(lambda t: {"Text": t}, st.text())),
                                    max_size=8))
def test_any_event_pushes_as_a_cloudevent(data: Any, headers: list[Any]) -> None:
    """Whatever headers a publisher set (``cloudevents:*`` headers are not reserved), the
    push is a CloudEvent with the required attributes, and no header value can break the
    HTTP request (binary mode percent-encodes)."""
    for mode in cloudevents_push.MODES:
        body, http_headers = cloudevents_push.push([_note(data, headers)], mode)
        for name, value in http_headers.items():
            assert value.isascii() and value.isprintable(), (name, value)
        attrs = ({k[3:]: unquote(v) for k, v in http_headers.items() if k.startswith("ce-")} if mode == "binary"
                 else json.loads(body))
        assert attrs["specversion"] == "1.0" and attrs["tidingsnotification"] == "7"
        assert all(isinstance(attrs[k], str) and attrs[k] for k in ("id", "source", "type", "time"))
        (batched,) = json.loads(cloudevents_push.push([_note(data, headers)] * 2, mode)[0])[:1]
        assert batched["id"] == attrs["id"]


@settings(max_examples=200)
@given(_json, st.dictionaries(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True).filter(
    lambda k: k not in {"id", "source", "type", "specversion", "time", "subject", "dataschema", "datacontenttype",
                        "traceparent", "tracestate", "tidingsnotification", "tidingseventid", "tidingsnamespace"}),
    st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=8) | st.booleans()
    | st.integers(-(2**31), 2**31 - 1), max_size=3))
def test_a_cloudevent_goes_out_as_it_came_in(data: Any, extensions: dict[str, Any]) -> None:
    sent = {"specversion": "1.0", "id": "x", "source": "/s", "type": "t", "time": "2026-01-01T00:00:00Z",
            **extensions, "data": data}
    (event,) = cloudevents.from_http("ns", cloudevents.STRUCTURED, [], json.dumps(sent).encode(), max_events=1)
    body, _ = cloudevents_push.push([_note(event.data, event.headers)], "structured")
    got = json.loads(body)
    assert {k: v for k, v in got.items() if not k.startswith("tidings")} == sent
