"""CloudEvents 1.0 out: a push's notifications as CloudEvents over HTTP.

A subscription with ``tidings:subscription:cloudevents`` set to ``binary`` or
``structured`` gets its pushes in that HTTP mode (a batch of several in batched mode,
whichever it chose); docs/cloudevents.md has the table. An event that came in as a
CloudEvent (``core.cloudevents``) goes out as it came: its attributes from the
``cloudevents:*`` headers, its data in its form. Any other event gets attributes made
from what tidings knows of it: ``id`` its event id, ``source`` ``tidings:<namespace>``,
``type`` its namespace, ``time`` its broadcaster timestamp, its data as the JSON view of
its ICRC-16 value (``core.jsonview``). So ``id``, ``source``, ``type`` and ``time``
depend on the event alone and are the same on every retry. Every CloudEvent also
carries the extensions ``tidingsnotification`` (the notification id, the same on every
retry), ``tidingseventid`` and ``tidingsnamespace``, and, when the event has a trace
context, ``traceparent`` (and ``tracestate``).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from typing import Any, Final, Literal

import msgspec

from . import tracecontext
from .cloudevents import ABSENT, BATCH, PREFIX, STRUCTURED, is_json, valid_attribute
from .jsonview import json_view

__all__ = ["ALLOWED_HEADER", "MODES", "ORIGIN_HEADER", "Note", "handshake_refusal", "push", "rfc3339"]

MODES: Final = ("binary", "structured")
"""The values of ``tidings:subscription:cloudevents``."""
NOTIFICATION: Final = "tidingsnotification"
EVENT_ID: Final = "tidingseventid"
NAMESPACE: Final = "tidingsnamespace"

_NAME: Final = re.compile(r"[a-z0-9]{1,64}", re.ASCII)
_REQUIRED: Final = ("id", "source", "type")
_INT32: Final = (-(2**31), 2**31 - 1)
_PLAIN: Final = frozenset(range(0x21, 0x7F)) - {ord('"'), ord("%")}
"""Bytes a binary-mode header value keeps as they are (HTTP binding §3.1.3.2)."""
_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode


class Note(msgspec.Struct, frozen=True):
    """What a push needs of one notification: its id and its event as stored (the data
    and headers as their JSON wire bytes)."""

    id: int
    event_id: int
    namespace: str
    timestamp: int
    data: bytes
    headers: bytes


def rfc3339(ns: int) -> str:
    """UTC nanoseconds as an RFC 3339 timestamp (``2026-11-27T08:00:00.123456789Z``)."""
    seconds, frac = divmod(ns, 10**9)
    days, rest = divmod(seconds, 86_400)
    # Days since 1970-01-01 to a civil date (H. Hinnant's algorithm): no clock, no I/O.
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    h, m, s = rest // 3600, rest // 60 % 60, rest % 60
    fraction = f".{frac:09d}" if frac else ""
    return f"{year:04d}-{month:02d}-{day:02d}T{h:02d}:{m:02d}:{s:02d}{fraction}Z"


def _attribute_value(wire: Any) -> str | bool | int | None:
    """A header's value as a CloudEvents attribute value, or None if it cannot be one."""
    if not isinstance(wire, dict) or len(wire) != 1:
        return None
    ((tag, x),) = wire.items()
    if tag == "Text" and isinstance(x, str):
        return x
    if tag == "Bool" and isinstance(x, bool):
        return x
    if tag in ("Int", "Nat", "Int32") and type(x) is int and _INT32[0] <= x <= _INT32[1]:
        return x
    return None


def _event(n: Note) -> tuple[dict[str, Any], Any, str | None]:
    """The attributes of ``n``'s CloudEvent (JSON values), its data (decoded), and the
    data's form: ``"json"``, ``"text"``, ``"bytes"`` or None (no data)."""
    attrs: dict[str, Any] = {}
    absent = False
    trace: dict[str, str] = {}
    for key, wire in _decode(n.headers):
        if key.startswith(PREFIX):
            if key == ABSENT:
                absent = wire == {"Bool": True}
                continue
            name = key[len(PREFIX):]
            value = _attribute_value(wire)
            # Headers of an event published by icrc72_publish were never checked: what
            # a CloudEvent received may not hold, a CloudEvent sent does not either.
            if value is not None and _NAME.fullmatch(name) is not None and valid_attribute(name, value):
                attrs[name] = value
        elif key in (tracecontext.TRACEPARENT, tracecontext.TRACESTATE):
            value = _attribute_value(wire)
            if isinstance(value, str):
                trace[key] = value
    received = "specversion" in attrs and all(name in attrs for name in _REQUIRED)
    if not received:
        # Not a CloudEvent as received (or its headers were not kept whole): tidings' own.
        attrs.update(id=str(n.event_id), source=f"tidings:{n.namespace}", type=n.namespace)
    attrs["specversion"] = "1.0"
    if not isinstance(attrs.get("time"), str):
        attrs["time"] = rfc3339(n.timestamp)
    context = tracecontext.trace_context(trace.get(tracecontext.TRACEPARENT), trace.get(tracecontext.TRACESTATE))
    attrs.pop(tracecontext.TRACEPARENT, None)
    attrs.pop(tracecontext.TRACESTATE, None)
    if context is not None:
        attrs[tracecontext.TRACEPARENT] = context.traceparent
        if context.tracestate is not None:
            attrs[tracecontext.TRACESTATE] = context.tracestate
    attrs[NOTIFICATION] = str(n.id)
    attrs[EVENT_ID] = str(n.event_id)
    attrs[NAMESPACE] = n.namespace
    data = _decode(n.data)
    content_type = attrs.get("datacontenttype")
    if not (isinstance(content_type, str) and content_type.isascii()):
        # It may travel as the Content-Type header: nothing that could break the header.
        attrs.pop("datacontenttype", None)
        content_type = None
    if absent and data == {"Option": None}:
        return attrs, None, None
    if isinstance(data, dict) and "Blob" in data:
        return attrs, base64.b64decode(data["Blob"]), "bytes"
    if isinstance(data, dict) and "Text" in data and content_type is not None and not is_json(content_type):
        return attrs, data["Text"], "text"
    if not received and content_type is None:
        attrs["datacontenttype"] = "application/json"
    return attrs, json_view(data), "json"


def _structured(attrs: dict[str, Any], data: Any, form: str | None) -> dict[str, Any]:
    out = dict(attrs)
    if form == "bytes":
        out["data_base64"] = base64.b64encode(data).decode()
    elif form is not None:
        out["data"] = data
    return out


def _header_value(value: str | bool | int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raw = value.encode()
    if all(b in _PLAIN for b in raw):
        return value
    return "".join(chr(b) if b in _PLAIN else f"%{b:02X}" for b in raw)


def push(notes: Sequence[Note], mode: Literal["binary", "structured"] | str) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a push of ``notes`` in ``mode`` (``MODES``): one
    notification in that mode, several in batched mode."""
    events = [_event(n) for n in notes]
    if len(events) != 1:
        return _encode([_structured(*e) for e in events]), {"content-type": BATCH}
    ((attrs, data, form),) = events
    headers: dict[str, str] = {}
    context = attrs.get(tracecontext.TRACEPARENT)
    if context is not None:  # for the receiver's HTTP tracing too, not only its CloudEvents SDK
        headers[tracecontext.TRACEPARENT] = context
        if tracecontext.TRACESTATE in attrs:
            headers[tracecontext.TRACESTATE] = attrs[tracecontext.TRACESTATE]
    if mode != "binary":
        headers["content-type"] = STRUCTURED
        return _encode(_structured(attrs, data, form)), headers
    for name, value in attrs.items():
        if name != "datacontenttype":
            headers[f"ce-{name}"] = _header_value(value)
    content_type = attrs.get("datacontenttype")
    if form == "json":
        headers["content-type"] = content_type or "application/json"
        return _encode(data), headers
    if content_type is not None:
        headers["content-type"] = content_type
    if form == "bytes":
        return data, headers
    return (data.encode() if form == "text" else b""), headers


ORIGIN_HEADER: Final = "WebHook-Request-Origin"
ALLOWED_HEADER: Final = "WebHook-Allowed-Origin"


def handshake_refusal(status: int | None, code: str, allowed: str | None, origin: str) -> str | None:
    """Why an endpoint's answer to the CloudEvents webhook validation request (an
    ``OPTIONS`` with ``WebHook-Request-Origin: origin``; CloudEvents Web Hooks §4.1)
    does not let ``origin`` push to it, or None: a 2xx whose ``WebHook-Allowed-Origin``
    is ``origin`` or ``*``. ``code`` is the call's outcome (``timeout``...)."""
    if status is None:
        return f"the endpoint did not answer the CloudEvents webhook handshake ({code})"
    if not 200 <= status < 300:
        return f"the endpoint answered the CloudEvents webhook handshake with {status}"
    given = (allowed or "").strip()
    if given not in (origin, "*"):
        return (f"the endpoint's {ALLOWED_HEADER} does not allow {origin!r}"
                + ("" if given else " (the header is missing)") + " (CloudEvents webhook handshake)")
    return None
