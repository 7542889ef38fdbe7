"""Where a replay reads its events: the hot log (the store), or the Parquet archive (pyarrow).

The seam is the archive manifest's mark ``hwm`` for the namespace, as for
:func:`tidings.pipeline.history.events`: ids up to it are read from the archive, ids
above from the hot log. The mark is read again for every read, so a replay that runs
while the archive job moves it carries on from the archive; an archive run trims the
hot log only after moving the mark, and a hot read that finds a hole in the id chain
reads the mark again before going on (a hole the mark does not cover was made by
retention: those events are gone and are counted as skipped).

Archive reads (:func:`tidings.pipeline.archive_read.read_archived`: only the files and
row groups that hold the window, no Spark) and the filter over them run in a thread, so
the event loop keeps serving live traffic meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import msgspec

from ...core.config import SubscriptionConfig
from ...core.replay import append_pairs
from ...settings import Settings
from ...store import Store, StoredEvent

__all__ = ["ReadAhead", "ReplaySource", "passing"]

log = logging.getLogger("tidings.replay")
_decode = msgspec.json.Decoder().decode


def passing(rules: SubscriptionConfig, events: list[StoredEvent]) -> list[StoredEvent]:
    """The events a replay with these filter and skip rules sends (the live rules: the
    filter over the decoded data first, then skip); in the broker and the replay process."""
    if rules.predicate is None and rules.skip is None:
        return events
    if rules.predicate is None:
        return [e for e in events if rules.passes(e.id, None)]
    return [e for e in events if rules.passes(e.id, _decode(e.data))]


class ReplaySource:
    def __init__(self, store: Store, settings: Settings) -> None:
        self._store = store
        self._settings = settings
        self.archive_dir = Path(settings.archive_dir) if settings.archive_dir else settings.data_dir / "archive"

    def hwm(self, namespace: str) -> int:
        from ...pipeline.layout import Manifest

        return Manifest.load(self.archive_dir).hwm(namespace)

    async def read(
        self, namespace: str, after_id: int, before_id: int, filter_text: str | None, pairs: bytes | None = None,
        *, first: bool = False,
    ) -> tuple[list[StoredEvent], int]:
        """Events with ``after_id < id < before_id``, in id order, and the id up to which
        the range has been looked at (everything up to it not returned is filtered out
        by ``filter_text``, or gone); with the header ``pairs`` appended to each, if given.

        An archive read looks at ten times ``replay_read_size`` ids (one read's fixed cost
        is the files' footers), but a run's ``first`` read only at as many as a hot read:
        the first batch leaves sooner, and the next window is read while it is out."""
        hwm = await asyncio.to_thread(self.hwm, namespace)
        if after_id < hwm:
            span = self._settings.replay_read_size * (1 if first else 10)
            hi = min(before_id, hwm + 1, after_id + 1 + span)
            events = await asyncio.to_thread(self._read_archive, namespace, after_id + 1, hi, pairs)
            return events, hi - 1
        limit = self._settings.replay_read_size
        events = await self._store.read_range(namespace, after_id, before_id, limit, pairs=pairs)
        expected = after_id + 1
        for i, e in enumerate(events):
            if e.id != expected:
                # A hole: an archive run may have moved the mark and trimmed meanwhile.
                if await asyncio.to_thread(self.hwm, namespace) >= expected:
                    return events[:i], expected - 1
            expected = e.id + 1
        upto = events[-1].id if len(events) == limit else before_id - 1
        return events, upto

    def _read_archive(self, namespace: str, lo: int, hi: int, pairs: bytes | None) -> list[StoredEvent]:
        """Archived events with ``lo <= id < hi``; the replay applies its filter and skip to them, as to hot ones."""
        import pyarrow as pa

        from ...pipeline.archive_read import read_archived

        t = read_archived(self.archive_dir, namespace, lo, hi - 1)
        cols = [t.column(n).to_pylist() for n in ("seq", "id", "prev_id", "timestamp", "source")]
        # The texts as bytes straight from Arrow's buffers (a cast without a copy), not str then encode.
        cols += [t.column(n).cast(pa.binary()).to_pylist() for n in ("headers", "data")]
        if pairs is not None:
            cols[5] = [append_pairs(h, pairs) for h in cols[5]]
        return [
            StoredEvent(
                seq=seq, namespace=namespace, id=i, prev_id=prev, timestamp=ts, source=src, headers=headers, data=data,
            )
            for seq, i, prev, ts, src, headers, data in zip(*cols, strict=True)
        ]

    def close(self) -> None:
        """Nothing to release: archive reads hold no session."""


class ReadAhead:
    """At most one read of a replay's range ahead of the batch being recorded and pushed."""

    def __init__(self, source: ReplaySource, namespace: str, before_id: int, pairs: bytes) -> None:
        self._source = source
        self._ns = namespace
        self._before = before_id
        self._pairs = pairs
        """The replay's headers, appended to each event as it is read."""
        self._next: tuple[int, str | None, asyncio.Task[tuple[list[StoredEvent], int]]] | None = None

    def start(self, after_id: int, filter_text: str | None) -> None:
        self.cancel()
        task = asyncio.create_task(self._source.read(self._ns, after_id, self._before, filter_text, self._pairs))
        self._next = (after_id, filter_text, task)

    async def read(self, after_id: int, filter_text: str | None) -> tuple[list[StoredEvent], int]:
        """The read that was started for this position and filter, or a new one."""
        nxt, self._next = self._next, None
        if nxt is not None and nxt[0] == after_id and nxt[1] == filter_text:
            return await nxt[2]
        if nxt is not None:
            self._next = nxt
            self.cancel()
        return await self._source.read(self._ns, after_id, self._before, filter_text, self._pairs, first=True)

    def cancel(self) -> None:
        if self._next is not None:
            task = self._next[2]
            self._next = None
            if task.done():
                if not task.cancelled():
                    task.exception()  # retrieved: the read is not wanted any more
            else:
                task.cancel()
