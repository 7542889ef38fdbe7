"""Where to publish: the broadcaster that owns a publication (docs/scaling.md).

With several broadcasters every one accepts a publish, but the publication's owner is
where its events are best sent. A publisher that follows owners asks once per namespace
(``icrc72_get_publication_broadcasters``, cached for ``ttl`` seconds) and publishes to
the owner's URL; when the owner cannot be reached (nothing was sent), it forgets the
answer and publishes through the URL it was given.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import aiohttp

from ..core.wire import BroadcasterInfo, PublicationBroadcastersQuery
from ._errors import ClientError, TransportError
from ._http import Connection

__all__ = ["Owners", "unreachable"]


def unreachable(e: TransportError) -> bool:
    """Whether the call failed before anything was sent (so sending it elsewhere is safe)."""
    return isinstance(e.__cause__, aiohttp.ClientConnectorError)


class Owners:
    def __init__(self, base: Connection, token: str, *, timeout: float, ttl: float = 30.0) -> None:
        self._base = base
        self._token = token
        self._timeout = timeout
        self._ttl = ttl
        self._owner: dict[str, tuple[str, float]] = {}
        self._conns: dict[str, Connection] = {}

    async def connection(self, namespaces: Iterable[str]) -> Connection:
        """The owner's connection if every namespace has the same owner, else the base one."""
        urls = {await self._url(ns) for ns in set(namespaces)}
        if len(urls) != 1:
            return self._base
        url = urls.pop()
        if url == self._base.url:
            return self._base
        conn = self._conns.get(url)
        if conn is None:
            conn = self._conns[url] = Connection(url, self._token, timeout=self._timeout)
        return conn

    def forget(self, conn: Connection) -> None:
        """``conn``'s broadcaster could not be reached: ask again next time."""
        self._owner = {ns: v for ns, v in self._owner.items() if v[0] != conn.url}

    async def _url(self, namespace: str) -> str:
        now = time.monotonic()
        known = self._owner.get(namespace)
        if known is not None and known[1] > now:
            return known[0]
        url = self._base.url
        try:
            infos = await self._base.call(
                "icrc72_get_publication_broadcasters", PublicationBroadcastersQuery(namespace=namespace),
                list[BroadcasterInfo],
            )
        except ClientError:
            infos = []  # unknown namespace, an older server: the base URL answers for itself
        for b in infos:
            stats = dict(b.stats)
            if stats.get("tidings:broadcaster:role") == {"Text": "owner"}:
                found = stats.get("tidings:broadcaster:url", {}).get("Text")  # type: ignore[union-attr]
                if isinstance(found, str) and found.startswith(("http://", "https://")):
                    url = found.rstrip("/")
        self._owner[namespace] = (url, now + self._ttl)
        return url

    async def close(self) -> None:
        for c in self._conns.values():
            await c.close()
        self._conns.clear()
