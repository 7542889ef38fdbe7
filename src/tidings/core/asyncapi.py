"""The AsyncAPI 3.0 document of what one principal may publish to and receive.

Pure: the caller's view of the registry (which namespaces, which of its subscription
patterns, the schema bound to each, the CloudEvents modes it chose) is gathered by
``api/asyncapi.py`` and handed here as :class:`ChannelView`\\ s; this module only says
it in AsyncAPI's words (docs/asyncapi.md):

* a channel per namespace (address: the namespace) and per pattern the caller
  subscribes with (address: the pattern);
* per channel, the operation ``publish.<key>`` (``send``) when the caller may publish,
  and ``receive.<key>`` (``receive``) when it may subscribe;
* messages: ``event`` (what a publisher sends: the bound schema, in its own
  ``schemaFormat``), ``notification`` (tidings' own push: a JSON array of notifications,
  with the Standard Webhooks headers), and ``cloudevent*`` when the caller's
  subscriptions on the channel asked for CloudEvents;
* servers: the HTTP API, the stream face, the XMPP component when there is one;
  security: the bearer token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

__all__ = ["BoundSchema", "ChannelView", "Servers", "channel_key", "document", "schema_format", "schema_key"]

ASYNCAPI: Final = "3.0.0"
_JSON_DRAFTS: Final = {
    "draft-04": "draft-04", "draft-06": "draft-06", "draft-07": "draft-07",
    "2019-09": "2019-09", "2020-12": "2020-12",
}
_KEY_SAFE: Final = re.compile(r"[A-Za-z0-9.\-]")
_REF_SERVER: Final = "#/components/securitySchemes/bearer"


@dataclass(frozen=True, slots=True)
class BoundSchema:
    """The schema a namespace's events are checked against now (docs/schemas.md)."""

    id: int
    format: str
    """``JSON``, ``AVRO`` or ``PROTOBUF``."""
    model: str
    """The schema's text as registered."""


@dataclass(frozen=True, slots=True)
class ChannelView:
    """One channel as the caller sees it."""

    address: str
    """A namespace, or a pattern (``pattern``) the caller subscribes with."""
    pattern: bool = False
    send: bool = False
    """The caller may publish to it."""
    receive: bool = False
    """The caller may subscribe to it (or, for a pattern, does)."""
    schema: BoundSchema | None = None
    cloudevents: frozenset[str] = frozenset()
    """The CloudEvents modes (``binary``, ``structured``) of the caller's subscriptions on it."""
    covers: tuple[str, ...] = field(default=())
    """For a pattern: the registered namespaces it covers that the caller sees."""


@dataclass(frozen=True, slots=True)
class Servers:
    http: str
    """The HTTP API's base URL as the caller reached it (``http://host:port``)."""
    xmpp: str | None = None
    """The XMPP component's address when the XMPP face is on (docs/xmpp.md)."""


def channel_key(address: str, pattern: bool) -> str:
    """A component key for a channel (AsyncAPI keys hold ``A-Za-z0-9.-_``): ``_`` is
    written ``__``, ``:`` ``_c``, ``*`` ``_s``, anything else ``_x<hex>_``, so two
    addresses never share a key; patterns start ``pattern-``, namespaces ``ns-``."""
    out = []
    for c in address:
        if _KEY_SAFE.fullmatch(c):
            out.append(c)
        elif c == "_":
            out.append("__")
        elif c == ":":
            out.append("_c")
        elif c == "*":
            out.append("_s")
        else:
            out.append(f"_x{ord(c):x}_")
    return ("pattern-" if pattern else "ns-") + "".join(out)


def schema_format(s: BoundSchema) -> tuple[str, Any]:
    """The ``schemaFormat`` and ``schema`` of a Multi Format Schema Object for ``s``: JSON
    Schema with the draft its ``$schema`` names (2020-12 without one, as the registry
    reads it), Avro 1.9 as JSON, Protobuf 3 as the ``.proto`` text."""
    if s.format == "AVRO":
        return "application/vnd.apache.avro+json;version=1.9.0", msgspec.json.decode(s.model)
    if s.format == "PROTOBUF":
        return "application/vnd.google.protobuf;version=3", s.model
    model = msgspec.json.decode(s.model)
    declared = model.get("$schema", "") if isinstance(model, dict) else ""
    draft = next((d for key, d in _JSON_DRAFTS.items() if isinstance(declared, str) and key in declared), "2020-12")
    return f"application/schema+json;version={draft}", model


_WEBHOOK_HEADERS: Final = {
    "webhook-id": {"type": "string", "description": "The same on every retry of a push: dedupe by it."},
    "webhook-timestamp": {"type": "string", "description": "Seconds since the epoch, when the push was signed."},
    "webhook-signature": {"type": "string",
                          "description": "Standard Webhooks: v1,<base64 HMAC-SHA256 of id.timestamp.body>, "
                                         "one per secret in force."},
    "x-tidings-subscription": {"type": "string", "description": "The subscription's id."},
    "x-tidings-mode": {"type": "string", "enum": ["trusted", "oneshot"]},
    "traceparent": {"type": "string", "description": "W3C Trace Context of the first notification's event "
                                                     "that has one (each notification's headers carry its own)."},
    "tracestate": {"type": "string", "description": "The tracestate that goes with traceparent, if any."},
}
_CE_HEADERS: Final = {
    "ce-specversion": {"type": "string", "const": "1.0"},
    "ce-id": {"type": "string"},
    "ce-source": {"type": "string"},
    "ce-type": {"type": "string"},
    "ce-time": {"type": "string", "format": "date-time"},
    "ce-subject": {"type": "string"},
    "ce-dataschema": {"type": "string"},
    "ce-tidingsnotification": {"type": "string", "description": "The notification id (the same on every retry)."},
    "ce-tidingseventid": {"type": "string"},
    "ce-tidingsnamespace": {"type": "string"},
    "traceparent": {"type": "string", "description": "W3C Trace Context, when the event has one."},
    "content-type": {"type": "string", "description": "The CloudEvent's datacontenttype."},
}
_ENVELOPE: Final = {
    "type": "object",
    "required": ["specversion", "id", "source", "type", "time", "tidingsnotification", "tidingseventid",
                 "tidingsnamespace"],
    "properties": {
        "specversion": {"type": "string", "const": "1.0"}, "id": {"type": "string"},
        "source": {"type": "string"}, "type": {"type": "string"}, "time": {"type": "string", "format": "date-time"},
        "subject": {"type": "string"}, "datacontenttype": {"type": "string"}, "dataschema": {"type": "string"},
        "tidingsnotification": {"type": "string"}, "tidingseventid": {"type": "string"},
        "tidingsnamespace": {"type": "string"}, "traceparent": {"type": "string"}, "tracestate": {"type": "string"},
        "data": {"description": "The event's data (the channel's event payload)."},
        "data_base64": {"type": "string", "description": "The event's data, when it is bytes."},
    },
}
_NOTIFICATIONS: Final = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["id", "eventId", "prev_id", "timestamp", "namespace", "data", "source", "headers"],
        "properties": {
            "id": {"type": "integer", "description": "The notification id."},
            "eventId": {"type": "integer"}, "prev_id": {"type": ["integer", "null"]},
            "timestamp": {"type": "integer", "description": "UTC nanoseconds."},
            "namespace": {"type": "string"}, "source": {"type": "string"},
            "filter": {"type": ["string", "null"]},
            "data": {"type": "object", "description": (
                "The event's data as an ICRC-16 value (docs/wire-format.md); its JSON view matches the "
                "event payload.")},
            "headers": {"type": "array", "items": {"type": "array", "minItems": 2, "maxItems": 2}},
        },
    },
}


def _headers(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


_REQUIRED_WEBHOOK: Final = ("webhook-id", "webhook-timestamp", "webhook-signature")
_SHARED: Final = {
    # Written once in components.schemas and referred to from every channel, so that the
    # document grows by a few hundred bytes per channel, and by each bound schema once.
    "webhook-headers": _headers(_WEBHOOK_HEADERS, _REQUIRED_WEBHOOK),
    "cloudevent-binary-headers": _headers(
        {**_WEBHOOK_HEADERS, **_CE_HEADERS}, (*_REQUIRED_WEBHOOK, "ce-specversion", "ce-id", "ce-source", "ce-type")
    ),
    "notifications": _NOTIFICATIONS,
    "cloudevent": _ENVELOPE,
    "cloudevents": {"type": "array", "items": {"$ref": "#/components/schemas/cloudevent"}},
    "any-value": {"description": "Any ICRC-16 value: no schema is bound."},
    "pattern-events": {"description": "The events of the namespaces the pattern covers; see their channels."},
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def schema_key(s: BoundSchema) -> str:
    """The key of a bound schema in ``components.schemas``."""
    return f"schema-{s.id}"


def _messages(c: ChannelView) -> dict[str, Any]:
    if c.schema is not None and not c.pattern:
        payload = _ref(schema_key(c.schema))
    else:
        payload = _ref("pattern-events" if c.pattern else "any-value")
    out: dict[str, Any] = {}
    if c.send and not c.pattern:
        out["event"] = {
            "name": "event", "title": f"An event of {c.address}", "contentType": "application/json",
            "summary": "POST /v1/icrc72_publish (the data as ICRC-16), or POST /v1/cloudevents/<namespace> "
                       "(the data of a CloudEvent)",
            "description": "The payload is the event's data"
                           + (f" (schema {c.schema.id}, checked on publish)." if c.schema is not None else "."),
            "payload": payload,
        }
    if c.receive:
        out["notification"] = {
            "name": "notification", "title": "A push of notifications", "contentType": "application/json",
            "headers": _ref("webhook-headers"), "payload": _ref("notifications"),
        }
        if "binary" in c.cloudevents:
            out["cloudevent-binary"] = {
                "name": "cloudevent-binary", "title": "One CloudEvent, binary mode",
                "headers": _ref("cloudevent-binary-headers"), "payload": payload,
            }
        if "structured" in c.cloudevents:
            out["cloudevent-structured"] = {
                "name": "cloudevent-structured", "title": "One CloudEvent, structured mode",
                "contentType": "application/cloudevents+json",
                "headers": _ref("webhook-headers"), "payload": _ref("cloudevent"),
            }
        if c.cloudevents:
            out["cloudevent-batch"] = {
                "name": "cloudevent-batch", "title": "Several CloudEvents in one push, batched mode",
                "contentType": "application/cloudevents-batch+json",
                "headers": _ref("webhook-headers"), "payload": _ref("cloudevents"),
            }
    return out


def _servers(s: Servers) -> dict[str, Any]:
    scheme, _, rest = s.http.partition("://")
    host = rest.split("/", 1)[0]
    security = [{"$ref": _REF_SERVER}]
    out: dict[str, Any] = {
        "http": {"host": host, "protocol": scheme or "http", "pathname": "/v1", "security": security,
                 "description": "The HTTP API: POST /v1/<method> (docs/wire-format.md); pushes go from here "
                                "to each subscription's endpoint."},
        "stream": {"host": host, "protocol": "wss" if scheme == "https" else "ws", "pathname": "/v1/stream",
                   "security": security, "description": "The stream face (docs/streaming.md)."},
    }
    if s.xmpp is not None:
        out["xmpp"] = {"host": s.xmpp, "protocol": "xmpp",
                       "description": "The XMPP component: XEP-0021 and XEP-0060 (docs/xmpp.md)."}
    return out


def document(channels: Iterable[ChannelView], servers: Servers, *, version: str, caller: str) -> dict[str, Any]:
    """The AsyncAPI 3.0 document for ``caller``'s view."""
    chans: dict[str, Any] = {}
    ops: dict[str, Any] = {}
    schemas: dict[str, Any] = dict(_SHARED)
    for c in sorted(channels, key=lambda c: (c.pattern, c.address)):
        key = channel_key(c.address, c.pattern)
        messages = _messages(c)
        if not messages:
            continue
        uses_schema = "event" in messages or "cloudevent-binary" in messages
        if c.schema is not None and not c.pattern and uses_schema and schema_key(c.schema) not in schemas:
            fmt, schema = schema_format(c.schema)
            schemas[schema_key(c.schema)] = {"schemaFormat": fmt, "schema": schema}
        chan: dict[str, Any] = {"address": c.address, "messages": messages}
        if c.pattern:
            chan["description"] = "A pattern you subscribe with; it covers " + (
                ", ".join(c.covers) if c.covers else "no namespace registered now") + "."
        chans[key] = chan
        ref = {"$ref": f"#/channels/{key}"}
        if "event" in messages:
            ops[f"publish.{key}"] = {"action": "send", "channel": ref,
                                     "messages": [{"$ref": f"#/channels/{key}/messages/event"}]}
        received = [m for m in messages if m != "event"]
        if received:
            ops[f"receive.{key}"] = {"action": "receive", "channel": ref,
                                     "messages": [{"$ref": f"#/channels/{key}/messages/{m}"} for m in received]}
    return {
        "asyncapi": ASYNCAPI,
        "info": {
            "title": "tidings", "version": version,
            "description": f"What {caller} may publish to and receive (docs/asyncapi.md).",
        },
        "defaultContentType": "application/json",
        "servers": _servers(servers),
        "channels": chans,
        "operations": ops,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "A principal's token: Authorization: Bearer <token> (docs/operations.md).",
        }}},
    }
