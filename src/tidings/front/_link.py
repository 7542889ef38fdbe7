"""A front's end of the link to its broker (``core.link_wire``; docs/scaling.md, "The link").

One connection, opened at the first publish and again after it is lost, carries every
publish the front hands over: each gets a number, its answer is matched by it, so many
are in flight at once and each waits only for its own commit. A connection lost with
requests in flight fails each of them with :class:`LinkLost`: the broker may have stored
their events (the front answers 503, and a publisher retries with the same key). Nothing
is sent twice here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import msgspec

from ..core.ingest import PublishBatch
from ..core.link_wire import HEAD_BYTES, LinkAnswer, LinkRequest, frame, length

__all__ = ["BrokerLink", "LinkLost"]

_CONNECT_TIMEOUT_S = 10.0
_encode = msgspec.msgpack.Encoder().encode
_decode_answer = msgspec.msgpack.Decoder(LinkAnswer).decode


class LinkLost(Exception):
    """The broker could not be reached, or the connection ended before the answer came."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.waiting: dict[int, asyncio.Future[LinkAnswer]] = {}
        self.lost: BaseException | None = None
        self.reading = asyncio.create_task(self._read(reader), name="tidings-front-link")

    async def _read(self, reader: asyncio.StreamReader) -> None:
        why: BaseException
        try:
            while True:
                head = await reader.readexactly(HEAD_BYTES)
                answer = _decode_answer(await reader.readexactly(length(head)))
                fut = self.waiting.pop(answer.ref, None)
                if fut is not None and not fut.done():
                    fut.set_result(answer)
        except asyncio.IncompleteReadError:
            why = LinkLost("the broker closed the link")
        except (OSError, msgspec.DecodeError) as e:
            why = LinkLost(f"the link failed: {e}")
        except asyncio.CancelledError:
            why = LinkLost("the front is stopping")
            self._fail(why)
            raise
        self._fail(why)

    def _fail(self, why: BaseException) -> None:
        self.lost = why
        self.writer.close()
        waiting, self.waiting = self.waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(why)


class BrokerLink:
    def __init__(self, path: str, secret: str) -> None:
        self._path = path
        self._secret = secret.encode()
        self._conn: _Connection | None = None
        self._connecting: asyncio.Lock | None = None
        self._refs = itertools.count()

    async def publish(self, authorization: str, batch: PublishBatch) -> LinkAnswer:
        """The broker's answer to ``batch``; :class:`LinkLost` when there is none."""
        conn = await self._connection()
        ref = next(self._refs)
        fut: asyncio.Future[LinkAnswer] = asyncio.get_running_loop().create_future()
        conn.waiting[ref] = fut
        try:
            conn.writer.write(frame(_encode(LinkRequest(ref, authorization, batch))))
            await conn.writer.drain()
        except OSError as e:
            conn.waiting.pop(ref, None)
            raise LinkLost(f"the link failed: {e}") from None
        try:
            return await fut
        finally:
            conn.waiting.pop(ref, None)

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and conn.lost is None:
            return conn
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:  # one connection made at a time, shared by all waiting
            conn = self._conn
            if conn is not None and conn.lost is None:
                return conn
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(self._path, limit=2**20), _CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as e:
                raise LinkLost(f"the broker is not reachable: {e}") from None
            writer.write(frame(self._secret))
            self._conn = _Connection(reader, writer)
            return self._conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await conn.reading
