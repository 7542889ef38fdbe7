"""The frames of the link a front process hands its checked publishes to the broker over
(docs/scaling.md, "The link").

A stream socket in the broker's private data folder carries length-prefixed msgpack
frames: the front's first frame is the secret the broker gave it at start; each later one
a :class:`LinkRequest`, answered by a :class:`LinkAnswer` with the same ``ref``, in the
order the commits end rather than the order sent. An HTTP request and its answer through
a pooled client cost a front and the broker about as much as the publish itself
(BENCHMARKS.md, "One event per request"); a frame costs a few microseconds.
"""

from __future__ import annotations

from typing import Final

import msgspec

from .ingest import PublishBatch

__all__ = ["HEAD_BYTES", "MAX_HELLO_BYTES", "LinkAnswer", "LinkRequest", "frame", "length"]

HEAD_BYTES: Final = 4
"""A frame's length prefix: its payload's bytes, big-endian."""
MAX_HELLO_BYTES: Final = 1024
"""The largest first frame a broker reads (the secret is 43 characters)."""


class LinkRequest(msgspec.Struct, array_like=True, frozen=True):
    """One ``icrc72_publish`` (or CloudEvents publish) a front has checked and stamped."""

    ref: int
    """The front's number for it, unique among its requests in flight on the connection."""
    authorization: str
    """The caller's ``Authorization`` header as it came ("" when none)."""
    batch: PublishBatch


class LinkAnswer(msgspec.Struct, array_like=True, frozen=True):
    """The broker's whole HTTP answer to the request ``ref``, for the front to give as it is."""

    ref: int
    status: int
    headers: list[tuple[str, str]]
    """Its headers but ``Content-Length``."""
    body: bytes


def frame(payload: bytes) -> bytes:
    """``payload`` with its length prefix."""
    return len(payload).to_bytes(HEAD_BYTES, "big") + payload


def length(head: bytes) -> int:
    """The payload's length a frame's prefix gives."""
    return int.from_bytes(head, "big")
