"""CloudEvents 1.0 in: a CloudEvent received over HTTP, as tidings events.

The three HTTP modes (binary, structured, batched) are told apart by the Content-Type,
parsed and checked here, and each CloudEvent becomes an ``Event`` of the namespace the
request names. Every attribute is kept as an event header, so the push side can give the
CloudEvent back as it came (docs/cloudevents.md has the table):

* ``specversion``, ``id``, ``source``, ``type``, ``subject``, ``time``, ``datacontenttype``,
  ``dataschema`` and every extension ``x``: the header ``cloudevents:<name>``, Text (an
  extension given as a JSON boolean or integer stays Bool or Int);
* ``traceparent`` and ``tracestate``: the event's trace context, the headers
  ``traceparent`` and ``tracestate`` (``core.tracecontext``); an invalid one is dropped;
* the data: JSON data as the ICRC-16 value of the same shape (object → Map, array →
  Array, string → Text, integer → Nat or Int, number → Float, boolean → Bool, null →
  Option null); text data (binary mode, ``text/*`` in UTF-8) as Text; bytes as Blob; no
  data at all as Option null with ``cloudevents:data:absent`` set, so it stays apart
  from a JSON ``null``.

Everything received is hostile: each refusal is a :class:`CloudEventError` naming the
attribute (and the event's position in a batch), and every size is bounded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import unquote_to_bytes

import msgspec

from . import tracecontext
from .ingest import ERR_MAYBE_STORED
from .undecodable import UNDECODABLE
from .wire import Event, GenericError, ItemResult

__all__ = [
    "ABSENT",
    "BATCH",
    "MAX_ATTRIBUTES",
    "MAX_HEADERS",
    "MAX_HEADER_BYTES",
    "MAX_ID",
    "MAX_VALUE",
    "PREFIX",
    "STRUCTURED",
    "CloudEventError",
    "answer_status",
    "from_http",
    "is_json",
    "media_type",
    "valid_attribute",
    "valid_origin",
]

PREFIX: Final = "cloudevents:"
"""Event headers holding a CloudEvent's attributes: ``cloudevents:<attribute name>``."""
ABSENT: Final = "cloudevents:data:absent"
"""Set (Bool true) on an event whose CloudEvent had no data (attribute names hold no ``:``)."""
STRUCTURED: Final = "application/cloudevents+json"
BATCH: Final = "application/cloudevents-batch+json"

MAX_HEADERS: Final = 200
"""Header lines of one request: the attributes are bounded below, this bounds the work of
looking through the rest (431 past it)."""
MAX_HEADER_BYTES: Final = 64 << 10
"""Bytes of all header names and values of one request together (431 past them)."""
MAX_ATTRIBUTES: Final = 64
"""Attributes of one CloudEvent, extensions included."""
MAX_ID: Final = 256
"""Characters of an ``id``: it is a key receivers dedupe on."""
MAX_VALUE: Final = 4096
"""Characters of any other attribute's value."""
MAX_NAME: Final = 64
"""Characters of an attribute's name. The spec's 20 is a SHOULD that senders pass
(Knative's ``knativeerrordest``...); 64 bounds the work."""

_REQUIRED: Final = ("id", "source", "specversion", "type")
_CORE: Final = frozenset({*_REQUIRED, "subject", "time", "datacontenttype", "dataschema"})
_NAME: Final = re.compile(r"[a-z0-9]+", re.ASCII)
_TIME: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:", re.ASCII)
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_URI_BAD: Final = re.compile(r"[\x00-\x20\x7f-\U0010ffff\"<>\\^`{|}]")
_INT32: Final = (-(2**31), 2**31 - 1)
_ORIGIN: Final = re.compile(r"[!-~]{1,255}", re.ASCII)
_decode = msgspec.json.decode
_STATUS: Final = {"Unauthorized": 403, "NotFound": 404, "Busy": 429, "GenericError": 422, "ImproperId": 400}


class CloudEventError(ValueError):
    """A CloudEvent refused. ``attribute`` names the culprit (None: the request as a
    whole), ``index`` the event's position in a batch; ``status`` is the HTTP answer."""

    def __init__(self, attribute: str | None, reason: str, *, index: int | None = None, status: int = 400) -> None:
        where = f"event {index}: " if index is not None else ""
        what = f"attribute {attribute!r}: " if attribute is not None else ""
        super().__init__(f"{where}{what}{reason}")
        self.attribute = attribute
        self.index = index
        self.status = status


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type, lowercased, without parameters."""
    return (content_type or "").partition(";")[0].strip().lower()


def is_json(content_type: str | None) -> bool:
    """Whether data of this content type is JSON (the JSON format's rule: absent,
    ``application/json``, ``text/json`` or any ``+json`` suffix)."""
    mt = media_type(content_type)
    return mt in ("", "application/json", "text/json") or mt.endswith("+json")


def _charset_utf8(content_type: str) -> bool:
    for param in content_type.split(";")[1:]:
        k, _, v = param.partition("=")
        if k.strip().lower() == "charset":
            return v.strip().strip('"').lower() in ("utf-8", "utf8", "us-ascii")
    return True


def _text(name: str, value: Any, index: int | None) -> str:
    if not isinstance(value, str):
        raise CloudEventError(name, "must be a string", index=index)
    if not value and name in _CORE:
        raise CloudEventError(name, "must not be empty", index=index)
    if len(value) > (MAX_ID if name == "id" else MAX_VALUE):
        raise CloudEventError(name, f"longer than {MAX_ID if name == 'id' else MAX_VALUE} characters", index=index)
    if _CONTROL.search(value) is not None:
        raise CloudEventError(name, "holds a control character", index=index)
    return value


def _check_time(value: str, index: int | None) -> None:
    m = _TIME.fullmatch(value)
    bad = CloudEventError("time", f"{value[:64]!r} is not an RFC 3339 timestamp", index=index)
    if m is None:
        raise bad
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    offset = m.group(8)
    if offset not in ("Z", "z") and (int(offset[1:3]) > 23 or int(offset[4:6]) > 59):
        raise bad
    # A leap second (60) is valid RFC 3339.
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month) and hour <= 23 and minute <= 59
            and second <= 60):
        raise bad


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _check_uri(name: str, value: str, index: int | None, *, absolute: bool) -> None:
    # A URI holds printable ASCII only, and none of the characters RFC 3986 excludes.
    if _URI_BAD.search(value) is not None:
        raise CloudEventError(name, "is not a URI reference (a space, quote or non-ASCII character)", index=index)
    if absolute and _SCHEME.match(value) is None:
        raise CloudEventError(name, "must be an absolute URI (with a scheme)", index=index)


def _attribute(name: str, value: Any, index: int | None) -> Any:
    """The header value for attribute ``name`` given ``value`` (already known not null)."""
    if name not in _CORE and (len(name) > MAX_NAME or _NAME.fullmatch(name) is None):
        raise CloudEventError(
            name[:MAX_NAME], "an attribute name holds only a-z and 0-9 (CloudEvents 1.0 §3.1.1)", index=index
        )
    if name == "data":  # the JSON format's member for the data; never an attribute
        raise CloudEventError(name, "is reserved for the data (JSON format §3.1)", index=index)
    if name not in _CORE:
        if type(value) is bool:
            return {"Bool": value}
        if type(value) is int:
            if not _INT32[0] <= value <= _INT32[1]:
                raise CloudEventError(name, "an Integer attribute is a signed 32-bit number", index=index)
            return {"Int": value}
    text = _text(name, value, index)
    if name == "specversion" and text != "1.0":
        raise CloudEventError(name, f"{text[:16]!r} is not supported; only '1.0'", index=index)
    if name == "time":
        _check_time(text, index)
    elif name == "source":
        _check_uri(name, text, index, absolute=False)
    elif name == "dataschema":
        _check_uri(name, text, index, absolute=True)
    return {"Text": text}


def valid_origin(origin: str) -> bool:
    """Whether ``origin`` (a ``WebHook-Request-Origin``) may be echoed back as allowed: a
    DNS name or similar token, printable ASCII without spaces, at most 255 characters."""
    return _ORIGIN.fullmatch(origin) is not None and "," not in origin


def valid_attribute(name: str, value: Any) -> bool:
    """Whether ``value`` (a JSON string, boolean or integer) may be attribute ``name``'s,
    by the rules a CloudEvent received is held to."""
    try:
        _attribute(name, value, None)
    except CloudEventError:
        return False
    return True


def _headers(attributes: dict[str, Any], index: int | None, trace: tuple[str | None, str | None]) -> list[Any]:
    if len(attributes) > MAX_ATTRIBUTES:
        raise CloudEventError(None, f"more than {MAX_ATTRIBUTES} attributes", index=index)
    for name in _REQUIRED:
        if attributes.get(name) is None:
            raise CloudEventError(name, "is required and missing", index=index)
    pairs: list[Any] = []
    for name, value in attributes.items():
        if value is None:  # a JSON null is an absent attribute (JSON format §2.2)
            continue
        if name not in (tracecontext.TRACEPARENT, tracecontext.TRACESTATE):
            pairs.append((PREFIX + name, _attribute(name, value, index)))
    own = attributes.get(tracecontext.TRACEPARENT)
    if own is not None:  # the event's own trace context; the request's is the hop's
        state = attributes.get(tracecontext.TRACESTATE)
        trace = (own if isinstance(own, str) else None, state if isinstance(state, str) else None)
    context = tracecontext.trace_context(*trace)
    if context is not None:
        pairs.append((tracecontext.TRACEPARENT, {"Text": context.traceparent}))
        if context.tracestate is not None:
            pairs.append((tracecontext.TRACESTATE, {"Text": context.tracestate}))
    return pairs


def _icrc16(x: Any) -> Any:
    """The ICRC-16 wire value of decoded JSON ``x`` (the module docstring's table)."""
    if isinstance(x, str):
        return {"Text": x}
    if x is None:
        return {"Option": None}
    if type(x) is bool:
        return {"Bool": x}
    if type(x) is int:
        return {"Nat" if x >= 0 else "Int": x}
    if type(x) is float:
        return {"Float": x}
    if isinstance(x, list):
        return {"Array": [_icrc16(v) for v in x]}
    return {"Map": [[k, _icrc16(v)] for k, v in x.items()]}


def _json_data(body: bytes, index: int | None) -> Any:
    try:
        return _icrc16(_decode(body))
    except (*UNDECODABLE, UnicodeDecodeError):
        raise CloudEventError("datacontenttype", "declares JSON, but the data is not valid JSON", index=index) from None


def key_of(source: Any, event_id: Any) -> str | None:
    """The idempotency key of a CloudEvent: its ``source`` and ``id`` identify it (CloudEvents
    1.0 §3.1.1), so a sender's retry of it is a repeat. Hashed, since together they may be
    longer than a key may be (``ingest.MAX_KEY_CHARS``): ``ce:`` and 43 base64url characters."""
    if not isinstance(source, str) or not isinstance(event_id, str):
        return None
    digest = hashlib.sha256(source.encode() + b"\n" + event_id.encode()).digest()
    return "ce:" + base64.urlsafe_b64encode(digest).decode()[:43]


def _structured_one(obj: Any, namespace: str, index: int | None, trace: tuple[str | None, str | None]) -> Event:
    if not isinstance(obj, dict):
        raise CloudEventError(None, "a structured CloudEvent is a JSON object", index=index)
    attributes = {k: v for k, v in obj.items() if k not in ("data", "data_base64")}
    headers = _headers(attributes, index, trace)
    if "data" in obj and "data_base64" in obj:
        raise CloudEventError("data_base64", "data and data_base64 are exclusive", index=index)
    data: Any
    if "data_base64" in obj:
        b64 = obj["data_base64"]
        try:
            if not isinstance(b64, str):
                raise ValueError
            data = {"Blob": base64.b64encode(base64.b64decode(b64, validate=True)).decode()}
        except (ValueError, binascii.Error):
            raise CloudEventError("data_base64", "is not base64 text", index=index) from None
    elif "data" in obj:
        try:
            data = _icrc16(obj["data"])
        except RecursionError:
            raise CloudEventError("data", "is nested too deeply", index=index) from None
    else:
        data = {"Option": None}
        headers.append((ABSENT, {"Bool": True}))
    return Event(namespace=namespace, data=data, headers=headers,
                 idempotencyKey=key_of(attributes.get("source"), attributes.get("id")))


def _decode_json(body: bytes) -> Any:
    try:
        return _decode(body)
    except (*UNDECODABLE, UnicodeDecodeError):
        raise CloudEventError(None, "the body is not valid JSON (UTF-8)") from None


def _binary(
    namespace: str, content_type: str | None, headers: Sequence[tuple[bytes, bytes]], body: bytes,
    trace: tuple[str | None, str | None],
) -> Event:
    attributes: dict[str, Any] = {}
    for raw_name, raw_value in headers:
        low = raw_name.lower()
        if not low.startswith(b"ce-"):
            continue
        name = low[3:].decode("latin-1")
        if name in attributes:
            raise CloudEventError(name[:MAX_NAME], f"the header ce-{name[:MAX_NAME]} is repeated")
        if len(attributes) >= MAX_ATTRIBUTES:
            raise CloudEventError(None, f"more than {MAX_ATTRIBUTES} attributes")
        if name == "datacontenttype":
            raise CloudEventError(name, "in binary mode the Content-Type header carries it, not ce-datacontenttype")
        if len(raw_value) > 3 * MAX_VALUE:  # percent-encoded, each character is at most 3 bytes per byte
            raise CloudEventError(name[:MAX_NAME], f"longer than {MAX_VALUE} characters")
        try:
            attributes[name] = unquote_to_bytes(raw_value).decode()
        except UnicodeDecodeError:
            raise CloudEventError(name[:MAX_NAME], "is not UTF-8 once percent-decoded") from None
    if content_type is not None:
        attributes["datacontenttype"] = content_type
    if not attributes.keys() & {"specversion", "id", "source", "type"}:
        raise CloudEventError(
            "specversion", "no CloudEvent here: neither ce-* headers (binary mode) nor a "
            f"Content-Type of {STRUCTURED} or {BATCH}",
        )
    pairs = _headers(attributes, None, trace)
    if not body:
        data: Any = {"Option": None}
        pairs.append((ABSENT, {"Bool": True}))
    elif is_json(content_type) and content_type is not None:
        data = _json_data(body, None)
    elif media_type(content_type).startswith("text/") and _charset_utf8(content_type or ""):
        try:
            data = {"Text": body.decode()}
        except UnicodeDecodeError:
            data = {"Blob": base64.b64encode(body).decode()}
    else:
        data = {"Blob": base64.b64encode(body).decode()}
    return Event(namespace=namespace, data=data, headers=pairs,
                 idempotencyKey=key_of(attributes.get("source"), attributes.get("id")))


def from_http(
    namespace: str,
    content_type: str | None,
    headers: Sequence[tuple[bytes, bytes]],
    body: bytes,
    *,
    max_events: int,
    key: str | None = None,
) -> list[Event]:
    """The events of one HTTP request carrying CloudEvents to ``namespace``: the mode is
    the Content-Type's; ``headers`` are the request's raw header pairs; a batch holds at
    most ``max_events``. The request's own ``traceparent``/``tracestate`` headers are the
    trace context of each event that carries none. Each event's idempotency key is its
    ``source`` and ``id`` (:func:`key_of`), or ``key`` (the request's ``Idempotency-Key``
    header) for a request of one event. Raises :class:`CloudEventError`."""
    events = _from_http(namespace, content_type, headers, body, max_events)
    if key is not None:
        if len(events) != 1:
            raise CloudEventError(None, "the Idempotency-Key header keys a request of one CloudEvent")
        events[0].idempotencyKey = key
    return events


def _from_http(
    namespace: str, content_type: str | None, headers: Sequence[tuple[bytes, bytes]], body: bytes, max_events: int
) -> list[Event]:
    if len(headers) > MAX_HEADERS or sum(len(k) + len(v) for k, v in headers) > MAX_HEADER_BYTES:
        raise CloudEventError(
            None, f"at most {MAX_HEADERS} headers of {MAX_HEADER_BYTES} bytes in all", status=431
        )
    trace = _request_trace(headers)
    mt = media_type(content_type)
    if mt == STRUCTURED:
        return [_structured_one(_decode_json(body), namespace, None, trace)]
    if mt == BATCH:
        items = _decode_json(body)
        if not isinstance(items, list):
            raise CloudEventError(None, "a batch is a JSON array of CloudEvents")
        if len(items) > max_events:
            raise CloudEventError(None, f"a batch holds at most {max_events} events; this one holds {len(items)}")
        return [_structured_one(obj, namespace, i, trace) for i, obj in enumerate(items)]
    if mt.startswith("application/cloudevents"):
        raise CloudEventError(None, f"the event format {mt!r} is not supported; use JSON", status=415)
    return [_binary(namespace, content_type, headers, body, trace)]


def _request_trace(headers: Sequence[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    parent = state = None
    for name, value in headers:
        low = name.lower()
        if low == b"traceparent":
            parent = value.decode("latin-1")
        elif low == b"tracestate":
            state = value.decode("latin-1")
    return parent, state


def answer_status(results: Sequence[ItemResult | None], batched: bool) -> int:
    """The HTTP status of the answer to a request whose events got ``results``: 200 for a
    batch (the body is itemized) or an event taken; for one event refused, the status its
    error means, since a CloudEvents sender reads the status, not the body."""
    if batched or len(results) != 1 or results[0] is None or results[0].Err is msgspec.UNSET:
        return 200
    error = results[0].Err
    code = error.code
    if code == "GenericBatchError":
        return 400 if "at most" in str(error.GenericBatchError) else 503
    g = error.GenericError
    if code == "GenericError" and isinstance(g, GenericError) and g.error_code == ERR_MAYBE_STORED:
        return 503  # it may have been stored: the sender retries, and its key settles it
    return _STATUS.get(code, 400)
