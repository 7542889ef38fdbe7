"""The stream protocol's messages (``/v1/stream``, docs/streaming.md): one JSON text
message per WebSocket message, tagged by ``op``.

From the client:

* ``publish``: one event; answered by a ``results`` entry under the same ``ref`` once it
  is durable (or refused, item by item, with the same ``Err`` as ``icrc72_publish``);
* ``confirm``: ``icrc72_confirm_notifications`` over the connection;
* ``listen``: receive the pushes of these subscriptions (``stream:`` endpoints) here;
* ``ack`` / ``nack``: the subscriber's answer to a ``push``, as a 2xx answer (with an
  optional array of per-notification results) or an error status would be over HTTP.

From the server: ``results`` (many refs per message, each answered individually),
``confirmed``, ``listening``, ``push`` and ``error`` (a message that could not be taken,
with the ``ref`` when it had one).
"""

from __future__ import annotations

import re
from typing import Any

from msgspec import Struct

from .wire import ConfirmResult, Event, ItemResult

__all__ = [
    "CLOSE_AUTH",
    "CLOSE_MALFORMED",
    "CLOSE_POLICY",
    "CLOSE_TOO_BIG",
    "STREAM_PREFIX",
    "Ack",
    "ClientMessage",
    "Confirm",
    "Confirmed",
    "Listen",
    "Listening",
    "Nack",
    "Publish",
    "RefOnly",
    "Results",
    "StreamError",
    "endpoint_error",
]

STREAM_PREFIX = "stream:"
"""A subscription whose endpoint starts so receives its pushes over stream connections."""

CLOSE_MALFORMED = 1007
"""Close code: a message that is not UTF-8 JSON text of this protocol."""
CLOSE_POLICY = 1008
"""Close code: a binary message, or a limit of the connection broken."""
CLOSE_TOO_BIG = 1009
"""Close code: a message larger than ``stream_max_frame_bytes``."""
CLOSE_AUTH = 4401
"""Close code: the connection's token was revoked while it was open."""

_LABEL = re.compile(r"[A-Za-z0-9._~-]{0,128}", re.ASCII)


def endpoint_error(endpoint: str) -> str | None:
    """Why ``endpoint`` (``stream:<label>``) is not a stream endpoint, or None."""
    label = endpoint[len(STREAM_PREFIX):]
    if not endpoint.startswith(STREAM_PREFIX) or _LABEL.fullmatch(label) is None:
        return (f"a stream endpoint is {STREAM_PREFIX!r} and an optional label of at most 128 letters, "
                "digits or ._~-")
    return None


class Publish(Struct, tag="publish", tag_field="op", kw_only=True):
    ref: int
    event: Event


class Confirm(Struct, tag="confirm", tag_field="op", kw_only=True):
    ref: int
    ids: list[int]


class Listen(Struct, tag="listen", tag_field="op", kw_only=True):
    ref: int
    subscriptions: list[int]


class Ack(Struct, tag="ack", tag_field="op", kw_only=True):
    push: int
    results: Any = None
    """None, or one ``{"Ok": ...}``/``{"Err": ...}`` per notification (as an HTTP body)."""


class Nack(Struct, tag="nack", tag_field="op", kw_only=True):
    push: int
    status: int = 500
    """The HTTP status this answer stands for: 410 ends the subscription, 429/503 with
    ``retryAfter`` are back-pressure, anything else is an error answer."""
    retryAfter: float | None = None


ClientMessage = Publish | Confirm | Listen | Ack | Nack


class RefOnly(Struct):
    """What is read of a message that does not decode, to answer it under its ref."""

    ref: int | None = None


class Results(Struct, tag="results", tag_field="op", kw_only=True):
    refs: list[int]
    results: list[ItemResult | None]


class Confirmed(Struct, tag="confirmed", tag_field="op", kw_only=True):
    ref: int
    result: ConfirmResult


class Listening(Struct, tag="listening", tag_field="op", kw_only=True):
    ref: int
    results: list[ItemResult | None]


class StreamError(Struct, tag="error", tag_field="op", kw_only=True):
    ref: int | None
    code: str
    message: str
