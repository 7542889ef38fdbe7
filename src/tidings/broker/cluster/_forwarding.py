"""Forwarding publishes to the broadcaster that owns their publication.

With several broadcasters on one store, each publication is assigned to one of them
(``Membership.publication_owner``). Events that reach another broadcaster are checked
and stamped there (``core.ingest``), then sent to the owner's ``icrc72_publish_relay``,
which stores them as if their publisher had called it, and the owner's answer goes
back to the publisher. Appends to one namespace then come from one process, which
batches them, instead of every broadcaster queueing on the namespace's row lock.

Only broadcasters of the same store may relay: a relay is signed with a secret they
share through the store (``ClusterStore.peer_secret``), and its signature carries its
time, so a captured request is refused after ``MAX_SKEW_MS``.

When the owner cannot be reached at all (nothing was sent) the events are stored where
they arrived: the log is shared, so that is correct, only slower. An owner whose
heartbeat is late (stopped, or cut off) is not sent to at all. Each relay carries a
random token that the owner stores in the same statement as the events
(``RelayLog``). When the owner was reached but gave no usable answer in time (it was
stopped mid-request, it is slow, it answered 5xx), the sender withdraws the token: if
the owner had not stored the events, it never will (its append would reuse the token
and is refused), and they are stored here; if it had, the sender reads back what it
stored and answers with those ids. Either way each event is stored once, and a
publisher waits at most about ``timeout_s`` longer than usual.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Protocol

import aiohttp
import msgspec

from ...core.ingest import ERR_MAYBE_STORED, Prepared, PublishBatch
from ...core.wire import GenericError, ItemResult, err, ok
from ...errors import StoreError
from ...outbound import read_bounded
from ...store import NewEvent, PrincipalRecord, Stat, StoredEvent
from ._membership import Membership

__all__ = ["RELAY_HEADER", "Forwarding", "RelayBatch", "RelayLog", "Relayed"]


class RelayLog(Protocol):
    """The log's relay tokens (``PostgresStore``)."""

    async def append_relayed(
        self, events: Sequence[NewEvent], stats: Iterable[Stat], token: str | None
    ) -> list[StoredEvent]: ...

    async def withdraw_relay(self, token: str) -> list[StoredEvent] | None: ...

log = logging.getLogger("tidings.broker")

RELAY_HEADER: Final = "x-tidings-relay"
"""``t=<unix ms>,v1=<hex HMAC-SHA256 of "<t>." + body>``."""
MAX_SKEW_MS: Final = 60_000
MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024


class RelayBatch(msgspec.Struct, array_like=True, frozen=True):
    """The body of ``icrc72_publish_relay`` (msgpack): the publisher, and its events as
    the receiving broadcaster checked and stamped them."""

    source: str
    batch: PublishBatch
    admin: bool = False
    """Whether the publisher is an admin: the owner applies the same rights and limits."""
    token: str = ""
    """Stored with the events, so the sender can tell whether they were (``RelayLog``)."""


class Relayed(msgspec.Struct, frozen=True):
    """The owner's answer: one result per event of the request, ``None`` for those not sent."""

    results: list[ItemResult | None]
    warnings: list[str] = []


_encode = msgspec.msgpack.Encoder().encode
_decode_answer = msgspec.msgpack.Decoder(Relayed).decode


def sign(secret: bytes, body: bytes, now_ms: int) -> str:
    mac = hmac.new(secret, b"%d." % now_ms + body, hashlib.sha256).hexdigest()
    return f"t={now_ms},v1={mac}"


def verify(secret: bytes, header: str | None, body: bytes, now_ms: int) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` within ``MAX_SKEW_MS`` of now."""
    if not header or not secret or len(header) > 200:
        return False
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t = parts.get("t", "")
    if not (t.isascii() and t.isdigit()) or len(t) > 15 or abs(int(t) - now_ms) > MAX_SKEW_MS:
        return False
    return hmac.compare_digest(sign(secret, body, int(t)), f"t={t},v1={parts.get('v1', '')}")


class Forwarding:
    """Sends events to the owners of their publications; built once per broker."""

    def __init__(
        self, membership: Membership, log: RelayLog, *, timeout_s: float, stale_after_s: float = 2.5,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._clock = clock
        """The cluster's clock (``core.clock``): relays are signed with its time, which
        every member shares, so only a delay, never a member's wall clock, can make one late."""
        self._m = membership
        self._log = log
        self._timeout_s = timeout_s
        self._stale_after_s = stale_after_s
        """An owner whose heartbeat is older than this is not sent to."""
        self.secret = b""
        self._session: aiohttp.ClientSession | None = None

    async def start(self, secret: bytes) -> None:
        self.secret = secret
        if self._timeout_s > 0:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout_s, connect=min(self._timeout_s, 2.0)),
                connector=aiohttp.TCPConnector(limit=64, limit_per_host=16),
            )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def split(self, rows: Sequence[Prepared]) -> tuple[list[Prepared], dict[str, list[Prepared]]]:
        """``rows`` as those this broadcaster stores, and those to send, by owner URL."""
        if self._session is None:
            return list(rows), {}
        m = self._m
        urls = {n.id: n.url for n in m.nodes if m.seen_within(n, self._stale_after_s)}
        here: list[Prepared] = []
        away: dict[str, list[Prepared]] = {}
        owners: dict[str, str] = {}
        for row in rows:
            owner = owners.get(row.namespace)
            if owner is None:
                owner = owners[row.namespace] = m.publication_owner(row.namespace)
            url = urls.get(owner, "") if owner != m.me else ""
            if url.startswith(("http://", "https://")):
                away.setdefault(url, []).append(row)
            else:
                here.append(row)
        return here, away

    async def send(
        self, url: str, source: PrincipalRecord, n: int, rows: list[Prepared], now: int
    ) -> Relayed | None:
        """The owner's answer for ``rows``, an error for each when it may or may not have
        stored them, or ``None`` when it surely did not (then store them here)."""
        session = self._session
        if session is None:
            return None
        token = secrets.token_hex(16)
        body = _encode(RelayBatch(source.name, PublishBatch(n, now, rows, []), source.admin, token))
        headers = {RELAY_HEADER: sign(self.secret, body, self._clock() // 1_000_000),
                   "content-type": "application/msgpack"}
        try:
            async with session.post(
                url + "/v1/icrc72_publish_relay", data=body, headers=headers, allow_redirects=False
            ) as resp:
                raw, over = await read_bounded(resp, MAX_ANSWER_BYTES)
                if resp.status == 200 and not over:
                    return _decode_answer(raw)
                if 400 <= resp.status < 500:
                    # Refused as a whole (a secret not shared yet, a limit): nothing stored.
                    log.warning("broadcaster at %s refused a relay: %s %s", url, resp.status, raw[:200])
                    return None
                why = f"answered {resp.status}" if not over else "answered more than it may"
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
            log.info("broadcaster at %s is unreachable (%s); storing its events here", url, e)
            return None
        except (TimeoutError, aiohttp.ClientError, msgspec.DecodeError) as e:
            why = f"gave no usable answer ({type(e).__name__})"
        try:
            stored = await self._log.withdraw_relay(token)
        except StoreError as e:
            log.warning("forwarding %d events to %s failed: it %s, and the store cannot say whether it stored "
                        "them: %s", len(rows), url, why, e)
            # Not GenericBatchError, which says nothing took effect: the outcome is unknown,
            # and a retry with the same idempotency keys settles it (docs/wire-format.md).
            failed: list[ItemResult | None] = [None] * n
            for row in rows:
                failed[row.index] = err("GenericError", GenericError(
                    ERR_MAYBE_STORED,
                    f"forwarded to the publication's broadcaster ({url}), which {why}, and the store cannot "
                    "say whether it stored the event: it may have been stored: retry with the same "
                    "idempotency key",
                ))
            return Relayed(failed)
        if stored is None:
            log.info("broadcaster at %s %s; storing its %d events here", url, why, len(rows))
            return None
        log.info("broadcaster at %s %s, but had stored the %d events", url, why, len(stored))
        return Relayed(_matched(n, rows, stored))

    async def store_relayed(
        self, events: Sequence[NewEvent], stats: Iterable[Stat], token: str
    ) -> list[StoredEvent]:
        """Append a relay received from another broadcaster, under its token."""
        return await self._log.append_relayed(events, stats, token)


def _matched(n: int, rows: Sequence[Prepared], stored: Sequence[StoredEvent]) -> list[ItemResult | None]:
    """The answer for ``rows`` once the owner is known to have stored ``stored`` of them:
    the owner kept their order and dropped those it refused (rights, schema), so each
    stored event is the next row with the same namespace, data and headers."""
    out: list[ItemResult | None] = [None] * n
    k = 0
    for row in rows:
        e = stored[k] if k < len(stored) else None
        if e is not None and (e.namespace, e.data, e.headers) == (row.namespace, row.data, row.headers):
            out[row.index] = ok([e.id])
            k += 1
        else:
            out[row.index] = err(
                "GenericBatchError",
                "the publication's broadcaster did not store this event (it refused it, and its answer was "
                "lost); publish it again to learn why",
            )
    return out
