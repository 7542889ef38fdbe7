"""Delivery records kept as one row per confirmed batch.

A batch pushed before being recorded and confirmed whole (a ``trusted`` subscription's
live batch, a hot replay's batch) has records that differ only in the notification id,
the event's ``seq``, id, source and timestamp. The SQLite store keeps such a batch as
one ``deliveries`` row whose ``items`` column packs those five values per record, and
whose ``serial`` is the first of ``n`` consecutive serials the batch takes. One row per
batch instead of one per notification is what the store's writer saves most on the
fan-out and replay paths (docs/benchmarks/history/2026-11-26-09-delivery-records-by-batch.md).

Both the store (``read_deliveries``, ``former_subscribers``) and the Spark source over
the records (``tidings.pipeline.deliveries``) turn such a row back into one record per
notification, with :func:`expand`: the rule lives here, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

__all__ = ["MAX_ITEMS", "RECORD_COLUMNS", "Items", "expand", "pack", "unpack"]

MAX_ITEMS: Final = 1000
"""The most records one row packs: a reader that looks for the row holding serial ``s``
needs to look back no further than ``s - MAX_ITEMS``."""

RECORD_COLUMNS: Final = (
    "serial", "notification_id", "subscription_id", "subscriber", "namespace", "seq", "event_id", "source",
    "event_timestamp", "created_at", "settled_at", "attempts", "outcome", "replay",
)
"""A delivery record's columns, in the order :func:`expand` reads and writes them."""

_PER_ITEM: Final = (RECORD_COLUMNS.index("serial"), RECORD_COLUMNS.index("notification_id"),
                    RECORD_COLUMNS.index("seq"), RECORD_COLUMNS.index("event_id"),
                    RECORD_COLUMNS.index("source"), RECORD_COLUMNS.index("event_timestamp"))


class Items(msgspec.Struct, frozen=True, array_like=True):
    """The per-record values of a packed row, column by column. ``sources`` is one
    string when every record has the same publisher (the usual case), which halves the
    row."""

    ids: list[int]
    seqs: list[int]
    event_ids: list[int]
    sources: str | list[str | None] | None
    timestamps: list[int | None]

    def source_list(self) -> list[str | None]:
        s = self.sources
        return s if isinstance(s, list) else [s] * len(self.ids)


_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(Items)


def pack(ids: Sequence[int], seqs: Sequence[int], event_ids: Sequence[int], sources: Sequence[str | None],
         timestamps: Sequence[int | None]) -> bytes:
    """The ``items`` of a row of ``len(ids)`` records (at most :data:`MAX_ITEMS`)."""
    n = len(ids)
    if not 0 < n <= MAX_ITEMS or not n == len(seqs) == len(event_ids) == len(sources) == len(timestamps):
        raise ValueError(f"a packed row holds 1 to {MAX_ITEMS} records of five equal columns")
    first = sources[0]
    one = all(s == first for s in sources)
    return _encoder.encode(Items(list(ids), list(seqs), list(event_ids), first if one else list(sources),
                                 list(timestamps)))


def unpack(items: bytes) -> Items:
    """What :func:`pack` packed (a ``msgspec.ValidationError`` for anything else)."""
    got = _decoder.decode(items)
    n = len(got.ids)
    ok = 0 < n <= MAX_ITEMS and n == len(got.seqs) == len(got.event_ids) == len(got.timestamps)
    if not ok or (isinstance(got.sources, list) and len(got.sources) != n):
        raise msgspec.ValidationError("a packed row's columns differ in length")
    return got


def expand(row: Sequence[Any], items: bytes | None) -> list[tuple[Any, ...]]:
    """The records of one stored row: ``row`` holds :data:`RECORD_COLUMNS` in order,
    ``items`` its packed values (None: the row is one record, returned as it is)."""
    if items is None:
        return [tuple(row)]
    got = unpack(items)
    base = list(row)
    first = int(row[0])
    i_serial, i_id, i_seq, i_event, i_source, i_ts = _PER_ITEM
    out = []
    for k, (nid, seq, eid, src, ts) in enumerate(
        zip(got.ids, got.seqs, got.event_ids, got.source_list(), got.timestamps, strict=True)
    ):
        base[i_serial], base[i_id], base[i_seq], base[i_event], base[i_source], base[i_ts] = (
            first + k, nid, seq, eid, src, ts
        )
        out.append(tuple(base))
    return out
