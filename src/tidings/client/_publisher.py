from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from msgspec import UNSET, structs

from ..core.wire import Event, ItemResult, PublicationRegistration, PublicationUpdate
from ._convert import wire, wire_changes, wire_pairs
from ._errors import ApiResponseError, ItemError, TransportError
from ._http import Connection
from ._owners import Owners, unreachable
from ._retry import RETRY_STATUSES, Backoff, keyed, unsettled


class SchemaWarning(UserWarning):
    """The service accepted events with a warning: their schema is Deprecated."""


class Publisher:
    """Registers publications and publishes events.

    ``data`` is plain Python (converted: int → Nat/Int, str → Text, dict → Map, ...) or a
    :class:`tidings.core.values.Value` for exact ICRC-16 types.

    ::

        async with Publisher("http://127.0.0.1:8072", token) as pub:
            await pub.register_publication("com.example.orders")
            event_id = await pub.publish("com.example.orders", {"order": 17, "total": 9.5})
    """

    def __init__(
        self, url: str, token: str, *, timeout: float = 30.0, follow_owners: bool = False,
        deadline: float = 60.0,
    ) -> None:
        """``follow_owners``: with several broadcasters (docs/scaling.md), publish each batch
        to its publication's owner, as ``icrc72_get_publication_broadcasters`` names it,
        rather than to ``url``; ``url`` still answers when the owner cannot be reached.

        Every event gets an idempotency key (a time-ordered UUID) unless it has one; a publish
        whose outcome is unknown (no answer, a lost connection, 429, 502, 503, 504, an item
        that may have been stored, ``Busy``) is sent again with the same keys, after a
        back-off with jitter (or the answer's ``Retry-After``), until ``deadline`` seconds
        have passed since the first try (0: one try); then :class:`PublishUncertain`. Each
        try waits at most ``timeout`` seconds."""
        self._conn = Connection(url, token, timeout=timeout)
        self._owners = Owners(self._conn, token, timeout=timeout) if follow_owners else None
        self._timeout = timeout
        self.deadline = deadline

    async def __aenter__(self) -> Publisher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owners is not None:
            await self._owners.close()
        await self._conn.close()

    async def register_publication(self, namespace: str, config: Mapping[str, Any] | None = None) -> None:
        """Register ``namespace`` (or join it as a further publisher); raises :class:`ItemError`."""
        (r,) = await self.register_publications([PublicationRegistration(
            namespace=namespace, config=wire_pairs(config)
        )])
        item_result(r)

    async def register_publications(self, regs: list[PublicationRegistration]) -> list[ItemResult | None]:
        return await self._conn.call("icrc72_register_publication", regs, list[ItemResult | None])

    async def update_publication(self, namespace: str, changes: Mapping[str, Any]) -> None:
        """Set config keys (a value) or remove them (``None``); controllers only."""
        upd = PublicationUpdate(namespace=namespace, config=wire_changes(changes))
        (r,) = await self._conn.call("icrc72_update_publication", [upd], list[ItemResult | None])
        item_result(r)

    async def delete_publication(self, namespace: str) -> None:
        """Delete a publication; its subscriptions end, its events stay in the log."""
        (r,) = await self._conn.call("icrc72_delete_publication", [namespace], list[ItemResult | None])
        item_result(r)

    async def publish(
        self, namespace: str, data: Any, *, headers: Mapping[str, Any] | None = None, key: str | None = None
    ) -> int:
        """Publish one event and return its id once it is durable (the id it was first stored
        under, if ``key`` was published before); raises :class:`ItemError`."""
        (r,) = await self.publish_batch([self.event(namespace, data, headers=headers, key=key)])
        ids: list[int] = item_result(r)
        return ids[0]

    async def publish_many(self, namespace: str, items: Iterable[Any]) -> list[int]:
        """Publish several events to one namespace in one call; raises on the first ``Err``."""
        results = await self.publish_batch([self.event(namespace, d) for d in items])
        return [item_result(r)[0] for r in results]

    async def publish_batch(self, events: list[Event]) -> list[ItemResult | None]:
        """``icrc72_publish``: one result per event, errors not raised. An event answered
        from its key (published before) is ``Ok`` with the id it was stored under and
        ``repeat`` set. Events without an ``idempotencyKey`` are given one; those whose
        outcome is unknown are sent again (see the class), raising
        :class:`PublishUncertain` once the deadline has passed.

        A ``Warning`` from the service (a Deprecated schema) is issued as :class:`SchemaWarning`."""
        sent = [keyed(e) for e in events]
        results: list[ItemResult | None] = [None] * len(sent)
        todo = list(range(len(sent)))
        backoff = Backoff(self.deadline)
        while True:
            wait: float | None = None
            try:
                within = self._timeout if self.deadline <= 0 else max(min(self._timeout, backoff.left()), 0.5)
                got = await self._publish_once([sent[i] for i in todo], within)
            except (TransportError, ApiResponseError) as e:
                if isinstance(e, ApiResponseError) and e.status not in RETRY_STATUSES:
                    raise
                problem: Exception = e
                wait = e.retry_after_s if isinstance(e, ApiResponseError) else None
            else:
                for i, r in zip(todo, got, strict=True):
                    results[i] = r
                todo = [i for i in todo if unsettled(results[i])]
                if not todo:
                    return results
                problem = ItemError("Unsettled", f"{len(todo)} event(s) not settled: {results[todo[0]]}")
            pause = backoff.pause(wait)
            if pause is None:
                raise backoff.gave_up([sent[i] for i in todo], problem) from problem
            await asyncio.sleep(pause)

    async def _publish_once(self, events: list[Event], timeout: float) -> list[ItemResult | None]:
        said: list[str] = []
        conn = self._conn if self._owners is None else await self._owners.connection(e.namespace for e in events)
        try:
            results = await conn.call("icrc72_publish", events, list[ItemResult | None], said, timeout=timeout)
        except TransportError as e:
            if conn is self._conn or self._owners is None or not unreachable(e):
                raise
            self._owners.forget(conn)  # nothing was sent: the URL we were given publishes it
            results = await self._conn.call(
                "icrc72_publish", events, list[ItemResult | None], said, timeout=timeout
            )
        for w in said:
            warnings.warn(SchemaWarning(w), stacklevel=2)
        return results

    @staticmethod
    def event(
        namespace: str, data: Any, *, headers: Mapping[str, Any] | None = None, key: str | None = None
    ) -> Event:
        """An event to publish; ``key``: its idempotency key (one is made if None)."""
        return Event(
            namespace=namespace, data=wire(data), headers=wire_pairs(headers) if headers else None,
            idempotencyKey=key,
        )


def item_result(result: ItemResult | None) -> Any:
    """The ``Ok`` value of an item result, or :class:`ItemError` for ``Err`` and ``null``."""
    if result is None:
        raise ItemError("NotProcessed", "the service did not process this item")
    if result.Err is not UNSET:
        code = result.Err.code
        raise ItemError(code, structs.asdict(result.Err)[code])
    return result.Ok
