"""Retention: the store trims events older than their schema's retention period.

A namespace's events are kept as long as the schema its publication is bound to says
(``retention_s``; none keeps them for ever). After a trim the schema's starting
position (``starting_at``) moves to the cut-off, as MRC's ``starting_block`` does. Events
still owed to a subscriber (unconfirmed or dead-lettered) are kept until settled.
The Spark archive job applies the same policy to the archive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.wire_schemas import RetentionRun, TrimmedNamespace
from ..store import Store
from ..tasks import stop_if_cancelled
from .binding import SchemaBinder
from .registry import SchemaRegistry

if TYPE_CHECKING:  # the broker imports this package
    from ..broker.registry import Orchestrator

__all__ = ["Retention", "RetentionRun", "TrimmedNamespace"]

log = logging.getLogger("tidings.retention")


class Retention:
    def __init__(
        self,
        store: Store,
        registry: SchemaRegistry,
        binder: SchemaBinder,
        orchestrator: Orchestrator,
        *,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._store = store
        self._registry = registry
        self._binder = binder
        self._orch = orchestrator
        self._clock = clock
        self._lock = asyncio.Lock()

    def policy_of(self, namespace: str, now: int) -> tuple[int, int] | None:
        """``(schema id, retention in seconds)`` that governs ``namespace``, or None."""
        conf = self._orch.pub_configs.get(namespace)
        if conf is None or conf.schema is None:
            return None
        schema_id = self._binder.bind(conf.schema, now).schema_id
        r = None if schema_id is None else self._registry.live(schema_id)
        if r is None or not r.retention_s:
            return None
        return r.id, r.retention_s

    async def apply(self) -> RetentionRun:
        async with self._lock:
            # Retention as stored: one changed through another broadcaster is the one applied.
            await self._registry.refresh()
            now = self._clock()
            done: list[TrimmedNamespace] = []
            cutoffs: dict[int, int] = {}
            for ns in sorted(self._orch.publications):
                policy = self.policy_of(ns, now)
                if policy is None:
                    continue
                schema_id, retention_s = policy
                before = now - retention_s * 1_000_000_000
                n = await self._store.trim_events(ns, before)
                done.append(TrimmedNamespace(namespace=ns, schema_id=schema_id, before=before, trimmed=n))
                cutoffs[schema_id] = max(cutoffs.get(schema_id, 0), before)
            for schema_id, before in cutoffs.items():
                await self._registry.set_starting_position(schema_id, before)
            return RetentionRun(at=now, namespaces=done)

    async def run(self, interval_s: float) -> None:
        """Trim every ``interval_s`` until cancelled; a failed round is logged and retried."""
        while True:
            stop_if_cancelled()  # also when a store call returned from a cancel as if done
            await asyncio.sleep(interval_s)
            try:
                run = await self.apply()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                stop_if_cancelled(e)  # a client library may turn a cancel into its own error
                log.exception("retention round failed; trying again in %ss", interval_s)
                continue
            trimmed = sum(t.trimmed for t in run.namespaces)
            if trimmed:
                log.info("retention trimmed %d events from %d namespaces", trimmed, len(run.namespaces))
