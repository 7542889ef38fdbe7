"""One persistent connection to ``/v1/stream``: publish with many events in flight, and
receive the pushes of ``stream:`` subscriptions (docs/streaming.md)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import msgspec

from ..core.wire import ConfirmResult, Event, EventNotification, ItemResult
from ..core.wire_stream import Ack, Confirm, Listen, Nack, Publish
from ._errors import ApiResponseError, ItemError, TransportError
from ._publisher import Publisher, item_result
from ._retry import RETRY_STATUSES, Backoff, keyed, unsettled
from ._subscriber import Handler

__all__ = ["RetryLater", "Stream"]

log = logging.getLogger("tidings.client.stream")

_encode = msgspec.json.Encoder().encode


class _Push(msgspec.Struct):
    push: int
    subscription: int
    mode: str
    notifications: list[EventNotification]


class _In(msgspec.Struct):
    """Any message from the server; which fields are set depends on ``op``."""

    op: str
    ref: int | None = None
    refs: list[int] = []
    results: list[ItemResult | None] = []
    result: ConfirmResult | None = None
    code: str = ""
    message: str = ""
    push: int = 0


class RetryLater(Exception):
    """Raised by a :class:`Stream` handler in ``trusted`` mode: the whole push is answered
    with back-pressure (``nack`` 503 with ``retryAfter``), which is not an attempt; the
    service pushes its notifications again after ``seconds``, those already handled too."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"retry after {seconds:g} s")
        self.seconds = seconds


_decode_in = msgspec.json.Decoder(_In).decode
_decode_push = msgspec.json.Decoder(_Push).decode


class Stream:
    """A WebSocket to the service, for publishers and subscribers alike.

    ``publish`` returns an event's id once it is durable; many calls may be in flight at
    once on the one connection (up to ``window``; further calls wait), and the events of
    one connection get ids in the order they were sent. ``send`` returns as soon as the
    event is on its way, with a future for its result.

    With ``handler``, :meth:`listen` has the pushes of ``stream:`` subscriptions sent
    here: the handler is called once per notification; in ``trusted`` mode an exception
    answers ``Err`` for that notification (it is sent again), in ``oneshot`` mode the
    push is acknowledged at once and the notifications handled are confirmed after.

    ::

        async with Stream("http://127.0.0.1:8072", token) as s:
            ids = await asyncio.gather(*(s.publish("com.example.orders", {"n": i}) for i in range(1000)))
    """

    def __init__(self, url: str, token: str, *, handler: Handler | None = None, window: int = 1024,
                 timeout: float = 30.0, deadline: float = 60.0) -> None:
        """``deadline``: how long :meth:`publish` retries an event whose outcome is unknown
        (the connection lost before its answer, ``Busy``, an item that may have been
        stored), reconnecting as needed, always with the event's idempotency key; then
        :class:`PublishUncertain` (0: one try). A connection opened again publishes only:
        :meth:`listen` again for pushes."""
        self.url = url.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/v1/stream"
        self._token = token
        self._handler = handler
        self._is_async = handler is not None and (
            inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)
        )
        self._timeout = timeout
        self.deadline = deadline
        self._reconnecting = asyncio.Lock()
        self._window = asyncio.Semaphore(window)
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._ref = 0
        self._background: set[asyncio.Task[None]] = set()
        self.close_code: int | None = None
        """The close code once the connection is closed (1009: a message was too large)."""
        self.close_reason = ""

    async def __aenter__(self) -> Stream:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the connection; a refused one raises :class:`ApiResponseError` (401, 429)."""
        self._session = aiohttp.ClientSession()
        try:
            self._ws = await self._session.ws_connect(
                self.url, headers={"Authorization": f"Bearer {self._token}"}, autoping=True,
                timeout=aiohttp.ClientWSTimeout(ws_close=self._timeout), max_msg_size=0,
            )
        except aiohttp.WSServerHandshakeError as e:
            await self._session.close()
            raise ApiResponseError(e.status, _code_of(e.status), e.message) from None
        except (aiohttp.ClientError, OSError) as e:
            await self._session.close()
            raise TransportError(f"stream: {e!r}") from e
        self._reader = asyncio.create_task(self._read(), name="tidings-stream-reader")

    async def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        for t in list(self._background):
            t.cancel()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def wait_closed(self) -> None:
        """Return once the connection has closed (the service went away, or :meth:`close`)."""
        if self._reader is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(self._reader)

    # -- publishing -----------------------------------------------------------------------

    async def publish(
        self, namespace: str, data: Any, *, headers: Mapping[str, Any] | None = None, key: str | None = None
    ) -> int:
        """Publish one event; its id once durable (the id it was first stored under, if
        ``key`` was published before). Raises :class:`ItemError` for ``Err``; an event
        whose outcome stays unknown is retried up to the deadline (see the class)."""
        event = keyed(Publisher.event(namespace, data, headers=headers, key=key))
        backoff = Backoff(self.deadline)
        while True:
            wait: float | None = None
            try:
                result = await (await self.send(event))
            except TransportError as e:
                problem: Exception = e
            except ApiResponseError as e:
                if e.status not in RETRY_STATUSES:
                    raise
                problem, wait = e, e.retry_after_s
            else:
                if not unsettled(result):
                    ids: list[int] = item_result(result)
                    return ids[0]
                problem = ItemError("Unsettled", str(result))
            pause = backoff.pause(wait)
            if pause is None:
                raise backoff.gave_up([event], problem) from problem
            await asyncio.sleep(pause)
            with contextlib.suppress(TransportError, ApiResponseError):  # the next try says so
                await self._reopen()

    async def _reopen(self) -> None:
        """Connect again if the connection is closed (once, for all the callers waiting)."""
        async with self._reconnecting:
            if self._ws is not None and not self._ws.closed:
                return
            if self._reader is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._reader
                self._reader = None
            if self._session is not None:
                await self._session.close()
            await self.connect()

    async def send(self, event: Event) -> asyncio.Future[ItemResult | None]:
        """Send one event (waiting while ``window`` are unanswered); the future gives its
        result, or raises :class:`ApiResponseError` if the service refused the message.
        The event is sent with an idempotency key: its own, or a new one."""
        event = keyed(event)
        await self._window.acquire()
        fut = self._expect()
        fut.add_done_callback(lambda _: self._window.release())
        ref = self._ref
        try:
            await self._send(Publish(ref=ref, event=event))
        except BaseException:
            self._waiting.pop(ref, None)
            if fut.done():
                fut.exception()  # retrieved: the caller gets the exception raised here
            else:
                fut.cancel()
            raise
        return fut

    # -- subscribing ----------------------------------------------------------------------

    async def listen(self, subscriptions: Sequence[int]) -> list[ItemResult | None]:
        """Have these subscriptions (``stream:`` endpoints, the caller's) pushed here."""
        if self._handler is None:
            raise ValueError("listen needs a Stream made with a handler")
        fut = self._expect()
        await self._send(Listen(ref=self._ref, subscriptions=list(subscriptions)))
        results: list[ItemResult | None] = await fut
        return results

    async def confirm(self, ids: Sequence[int]) -> ConfirmResult:
        """``icrc72_confirm_notifications`` over the connection."""
        fut = self._expect()
        await self._send(Confirm(ref=self._ref, ids=list(ids)))
        result: ConfirmResult = await fut
        return result

    # -- plumbing -------------------------------------------------------------------------

    def _expect(self) -> asyncio.Future[Any]:
        self._ref += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[self._ref] = fut
        return fut

    async def _send(self, message: Any) -> None:
        ws = self._ws
        if ws is None or ws.closed:
            self._fail_all()
            raise TransportError(f"stream: the connection is closed ({self.close_code} {self.close_reason})")
        try:
            await ws.send_str(_encode(message).decode())
        except (aiohttp.ClientError, ConnectionError) as e:
            raise TransportError(f"stream: {e!r}") from e

    async def _read(self) -> None:
        assert self._ws is not None
        ws = self._ws
        try:
            async for msg in ws:
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    continue
                m = _decode_in(msg.data)
                if m.op == "results":
                    for ref, result in zip(m.refs, m.results, strict=False):
                        fut = self._waiting.pop(ref, None)
                        if fut is not None and not fut.done():
                            fut.set_result(result)
                elif m.op == "push":
                    self._spawn(self._on_push(_decode_push(msg.data)))
                else:
                    fut = self._waiting.pop(m.ref, None) if m.ref is not None else None
                    if fut is None or fut.done():
                        if m.op == "error":
                            log.warning("stream: %s: %s", m.code, m.message)
                        continue
                    if m.op == "error":
                        fut.set_exception(ApiResponseError(400, m.code, m.message))
                    elif m.op == "confirmed":
                        fut.set_result(m.result)
                    else:
                        fut.set_result(m.results)
        finally:
            self.close_code = ws.close_code
            if ws.exception() is not None:
                self.close_reason = repr(ws.exception())
            self._fail_all()

    def _fail_all(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(TransportError(
                    f"stream: the connection closed ({self.close_code}) before the answer"
                ))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _handle(self, n: EventNotification) -> bool:
        assert self._handler is not None
        try:
            r = self._handler(n)
            if self._is_async or inspect.isawaitable(r):
                await r
        except (asyncio.CancelledError, RetryLater):
            raise
        except Exception:
            log.exception("stream: the handler failed on %s #%s", n.namespace, n.eventId)
            return False
        return True

    async def _on_push(self, p: _Push) -> None:
        with contextlib.suppress(TransportError):
            if p.mode == "oneshot":
                await self._send(Ack(push=p.push))
                done = []
                for n in p.notifications:
                    try:
                        if await self._handle(n):
                            done.append(n.id)
                    except RetryLater:  # received already: the rest stay unconfirmed, resent after the deadline
                        break
                if done:
                    await self.confirm(done)
                return
            try:
                answers = [{"Ok": None} if await self._handle(n) else {"Err": "handler failed"}
                           for n in p.notifications]
            except RetryLater as later:
                await self._send(Nack(push=p.push, status=503, retryAfter=max(later.seconds, 0.0)))
                return
            await self._send(Ack(push=p.push, results=answers))


def _code_of(status: int) -> str:
    return {401: "unauthenticated", 429: "too_many_connections"}.get(status, "http_error")
