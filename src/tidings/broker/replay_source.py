"""Where a replay reads its events: the hot log (the store), or the Parquet archive (Spark).

The seam is the archive manifest's mark ``hwm`` for the namespace, as for
:func:`tidings.pipeline.history.events`: ids up to it are read from the archive, ids
above from the hot log. The mark is read again for every read, so a replay that runs
while the archive job moves it carries on from the archive; an archive run trims the
hot log only after moving the mark, and a hot read that finds a hole in the id chain
reads the mark again before going on (a hole the mark does not cover was made by
retention: those events are gone and are counted as skipped).

The Spark session is made on first use only (it takes seconds to start) and its jobs
run in a thread, so the event loop keeps serving live traffic meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

from ..settings import Settings
from ..store import Store, StoredEvent

__all__ = ["ReplaySource"]

log = logging.getLogger("tidings.replay")


class ReplaySource:
    def __init__(self, store: Store, settings: Settings) -> None:
        self._store = store
        self._settings = settings
        self._spark: Any = None
        self._spark_lock = threading.Lock()
        self.archive_dir = Path(settings.archive_dir) if settings.archive_dir else settings.data_dir / "archive"

    def hwm(self, namespace: str) -> int:
        from ..pipeline.layout import Manifest

        return Manifest.load(self.archive_dir).hwm(namespace)

    async def read(
        self, namespace: str, after_id: int, before_id: int, filter_text: str | None
    ) -> tuple[list[StoredEvent], int]:
        """Events with ``after_id < id < before_id``, in id order, and the id up to which
        the range has been looked at (everything up to it not returned is filtered out
        by ``filter_text``, or gone). Archive reads apply ``filter_text`` in Spark."""
        hwm = await asyncio.to_thread(self.hwm, namespace)
        if after_id < hwm:
            hi = min(before_id, hwm + 1, after_id + 1 + 10 * self._settings.replay_read_size)
            events = await asyncio.to_thread(self._read_archive, namespace, after_id + 1, hi, filter_text)
            return events, hi - 1
        limit = self._settings.replay_read_size
        events = await self._store.read_range(namespace, after_id, before_id, limit)
        expected = after_id + 1
        for i, e in enumerate(events):
            if e.id != expected:
                # A hole: an archive run may have moved the mark and trimmed meanwhile.
                if await asyncio.to_thread(self.hwm, namespace) >= expected:
                    return events[:i], expected - 1
            expected = e.id + 1
        upto = events[-1].id if len(events) == limit else before_id - 1
        return events, upto

    def _session(self) -> Any:
        with self._spark_lock:
            if self._spark is None:
                from ..pipeline.session import build

                log.info("starting a Spark session for archived replays")
                self._spark = build(self._settings.spark_master or None, app_name="tidings-replay")
            return self._spark

    def _read_archive(self, namespace: str, lo: int, hi: int, filter_text: str | None) -> list[StoredEvent]:
        from ..pipeline.history import events

        spark = self._session()
        df = events(
            spark, namespace, lo, hi, archive_dir=self.archive_dir, filter=filter_text, origin="archive"
        ).select("seq", "namespace", "id", "prev_id", "timestamp", "source", "headers", "data").orderBy("id")
        table = df.toArrow()
        return [
            StoredEvent(
                seq=r["seq"], namespace=r["namespace"], id=r["id"], prev_id=r["prev_id"], timestamp=r["timestamp"],
                source=r["source"], headers=r["headers"].encode(), data=r["data"].encode(),
            )
            for r in table.to_pylist()
        ]

    def close(self) -> None:
        with self._spark_lock:
            if self._spark is not None:
                self._spark.stop()
                self._spark = None
