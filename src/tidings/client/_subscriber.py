from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from secrets import token_bytes
from typing import Any, Literal

import msgspec

from ..core import webhooks
from ..core.undecodable import UNDECODABLE
from ..core.wire import (
    ConfirmResult,
    DeadLetterInfo,
    DeadLetterQuery,
    EventNotification,
    ItemResult,
    SecretRotation,
    SubscriptionRegistration,
    SubscriptionUpdate,
)
from ._convert import wire_changes, wire_pairs
from ._http import Connection
from ._publisher import item_result

__all__ = ["Handler", "Subscriber"]

log = logging.getLogger("tidings.client.subscriber")

Handler = Callable[[EventNotification], Awaitable[Any] | Any]
"""Called once per notification; an exception answers ``Err`` so the broker sends it again."""

_decode_batch = msgspec.json.Decoder(list[EventNotification]).decode
_encode = msgspec.json.Encoder().encode

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class Subscriber:
    """An ASGI app that receives pushed notifications and hands each to ``handler``.

    Mount it in any ASGI server at the URL you register as the subscription's endpoint
    (it answers ``POST`` on every path). In ``trusted`` mode it answers each push with one
    ``{"Ok": ...}`` or ``{"Err": ...}`` per notification, which confirms the ``Ok`` ones.
    In ``oneshot`` mode it answers at once and confirms the handled notifications later
    through ``icrc72_confirm_notifications`` (``url`` and ``token`` are then required).

    Delivery is at least once; with ``dedupe`` (the default) a notification whose
    ``(namespace, eventId)`` this process has already handled is confirmed without
    calling the handler again.

    Pushes are signed (Standard Webhooks, docs/wire-format.md "Signed pushes"). With
    ``secret`` (one secret, or several while a rotation overlaps) every POST must carry a
    valid signature made at most ``tolerance_s`` seconds ago, else it is answered 401
    ``invalid_signature`` and the handler is not called; ``subscribe`` then registers
    subscriptions with the first of them. Without ``secret``, ``subscribe`` registers each
    subscription with a fresh secret and verifies its pushes with it; ``reveal_secrets(id)``
    and ``rotate_secret(id)`` add the secrets they return. Once such a Subscriber knows a
    secret, a push of a subscription it knows none for is refused too (after a restart,
    call ``reveal_secrets(id)`` for subscriptions registered earlier, or registered
    without a secret elsewhere). A Subscriber without ``secret`` that never learns one
    verifies nothing.

    ::

        async def handle(n: EventNotification) -> None:
            print(n.namespace, n.eventId, to_python(n.data))

        app = Subscriber(handle, url="http://127.0.0.1:8072", token=token)
        # uvicorn.run(app, port=9000); then once:
        await app.subscribe("com.example.orders", "http://127.0.0.1:9000/")
    """

    def __init__(
        self,
        handler: Handler,
        *,
        url: str | None = None,
        token: str | None = None,
        mode: Literal["trusted", "oneshot"] = "trusted",
        dedupe: bool | int = True,
        secret: str | Sequence[str] | None = None,
        tolerance_s: int = 300,
    ) -> None:
        self._handler = handler
        self._secrets: list[str] | None = None
        """Explicit secrets: they verify every push, and new subscriptions get the first."""
        if secret is not None:
            self._secrets = [secret] if isinstance(secret, str) else list(secret)
            if not self._secrets or any(not s for s in self._secrets):
                raise ValueError("secret: give at least one non-empty secret")
            for s in self._secrets:
                problem = webhooks.secret_error(s) if s.startswith(webhooks.PREFIX) else None
                if problem:
                    raise ValueError(f"secret: {problem}")
        self._sub_secrets: dict[int, list[str]] = {}
        """Without explicit secrets: the secrets learnt per subscription."""
        self._verifying = self._secrets is not None
        self.tolerance_s = tolerance_s
        # A coroutine function, or an object whose __call__ is one.
        self._is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            type(handler).__call__
        )
        self._conn = Connection(url, token) if url and token else None
        self.mode = mode
        self._seen: OrderedDict[tuple[str, int], None] | None = (
            OrderedDict() if dedupe else None
        )
        self._seen_max = 100_000 if dedupe is True else int(dedupe)
        self._background: set[asyncio.Task[None]] = set()

    # -- talking to the broker --------------------------------------------------------

    def _connection(self) -> Connection:
        if self._conn is None:
            raise ValueError("this Subscriber was made without url and token")
        return self._conn

    async def subscribe(
        self,
        namespace: str,
        endpoint: str,
        *,
        filter: str | None = None,
        skip: int | list[int] | None = None,
        stopped: bool = False,
        config: Mapping[str, Any] | None = None,
    ) -> int:
        """Register a subscription pushing to ``endpoint``; returns its id.

        Its pushes are signed with this Subscriber's first ``secret``, or with a fresh
        secret this Subscriber then verifies them with."""
        secret = self._secrets[0] if self._secrets is not None else webhooks.encode_secret(token_bytes(32))
        reg = SubscriptionRegistration(
            namespace=namespace, endpoint=endpoint, config=wire_pairs(config), filter=filter,
            skip=skip, stopped=stopped, mode=self.mode, secret=secret,
        )
        sub_id: int = await self._one("icrc72_register_subscription", reg)
        if self._secrets is None:
            self._learn(sub_id, [secret])
        return sub_id

    async def secrets(self, subscription_id: int) -> list[str]:
        """The secrets pushes to a subscription are signed with, newest first, masked
        (``whsec_AbCd…``): enough to tell them apart; :meth:`reveal_secrets` gives them."""
        found: list[str] = await self._one("tidings_get_subscription_secrets", subscription_id)
        return found

    async def reveal_secrets(self, subscription_id: int) -> list[str]:
        """The secrets pushes to a subscription are signed with, newest first, in full,
        asked of the service (the subscription's controllers may). Unless this Subscriber
        was given ``secret``, it verifies that subscription's pushes with them from now on:
        how one learns the secret the broker made for a subscription registered without
        one, or the secrets again after a restart."""
        found: list[str] = await self._one("tidings_reveal_subscription_secrets", subscription_id)
        if self._secrets is None:
            self._learn(subscription_id, found)
        return found

    async def rotate_secret(self, subscription_id: int, overlap_s: int | None = None) -> str:
        """Give a subscription a new signing secret and return it; the old ones keep
        signing for ``overlap_s`` seconds (default: the service's ``secret_overlap_s``).
        This Subscriber accepts the new one from now on."""
        new: str = await self._one(
            "tidings_rotate_subscription_secret", SecretRotation(id=subscription_id, overlap_s=overlap_s)
        )
        if self._secrets is not None:
            self._secrets.insert(0, new)
        else:
            self._learn(subscription_id, [new, *self._sub_secrets.get(subscription_id, ())])
        return new

    def _learn(self, subscription_id: int, found: list[str]) -> None:
        self._sub_secrets[subscription_id] = list(found)
        self._verifying = True

    async def update(
        self,
        subscription_id: int,
        changes: Mapping[str, Any] | None = None,
        *,
        endpoint: str | None = None,
        mode: Literal["trusted", "oneshot"] | None = None,
    ) -> None:
        """Change a subscription: config keys (``None`` removes one), endpoint or mode."""
        upd = SubscriptionUpdate(
            id=subscription_id, config=wire_changes(changes or {}), endpoint=endpoint, mode=mode
        )
        await self._one("icrc72_update_subscription", upd)

    async def start(self, subscription_id: int) -> None:
        """Start a stopped subscription; it receives events published from now on."""
        await self._one("icrc72_start_subscription", subscription_id)

    async def stop(self, subscription_id: int) -> None:
        await self._one("icrc72_stop_subscription", subscription_id)

    async def unsubscribe(self, subscription_id: int) -> None:
        await self._one("icrc72_delete_subscription", subscription_id)

    async def dead_letters(
        self, subscription_id: int | None = None, *, prev: int | None = None, take: int | None = None
    ) -> list[DeadLetterInfo]:
        """Notifications given up on, of one subscription or of all the caller's."""
        q = DeadLetterQuery(subscription=subscription_id, prev=prev, take=take)
        return await self._connection().call("tidings_get_dead_letters", q, list[DeadLetterInfo])

    async def redrive(self, ids: list[int]) -> list[ItemResult | None]:
        """Send dead letters again; itemized results."""
        return await self._connection().call("tidings_redrive_dead_letters", ids, list[ItemResult | None])

    async def drop_dead_letters(self, ids: list[int]) -> list[ItemResult | None]:
        return await self._connection().call("tidings_drop_dead_letters", ids, list[ItemResult | None])

    async def _one(self, method: str, item: Any) -> Any:
        (r,) = await self._connection().call(method, [item], list[ItemResult | None])
        return item_result(r)

    async def confirm(self, ids: list[int]) -> ConfirmResult:
        return await self._connection().call("icrc72_confirm_notifications", ids, ConfirmResult)

    async def close(self) -> None:
        for t in list(self._background):
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self._conn is not None:
            await self._conn.close()

    # -- handling ---------------------------------------------------------------------

    async def _handle_one(self, n: EventNotification) -> ItemResult:
        key = (n.namespace, n.eventId)
        if self._seen is not None and key in self._seen:
            return ItemResult(Ok=None)
        try:
            if self._is_async:
                value = await self._handler(n)  # type: ignore[misc]
            else:
                value = await asyncio.to_thread(self._handler, n)
        except Exception as e:
            log.warning("handler failed for %s/%s: %r", n.namespace, n.eventId, e)
            return ItemResult(Err={"GenericError": {"error_code": 1, "message": repr(e)}})  # type: ignore[arg-type]
        if self._seen is not None:
            self._seen[key] = None
            if len(self._seen) > self._seen_max:
                self._seen.popitem(last=False)
        return ItemResult(Ok=None if value is None or not _jsonable(value) else value)

    async def handle(self, batch: list[EventNotification]) -> list[ItemResult]:
        """Handle a batch in order; one result per notification."""
        return [await self._handle_one(n) for n in batch]

    async def _handle_and_confirm(self, batch: list[EventNotification]) -> None:
        results = await self.handle(batch)
        good = [n.id for n, r in zip(batch, results, strict=True) if r.Err is msgspec.UNSET]
        if good:
            try:
                await self.confirm(good)
            except Exception as e:  # the broker will send them again after its ack deadline
                log.warning("confirming %d notifications failed: %r", len(good), e)

    # -- ASGI -------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await _respond(send, 405, b'{"error":{"code":"method_not_allowed","message":"POST only"}}')
            return
        body = bytearray()
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if self._verifying:
            problem = self._signature_problem(scope, bytes(body))
            if problem is not None:
                log.warning("refused a push: %s", problem)
                await _respond(send, 401, _encode({"error": {"code": "invalid_signature", "message": problem}}))
                return
        try:
            batch = _decode_batch(body)
        except UNDECODABLE as e:
            await _respond(send, 400, _encode({"error": {"code": "invalid_argument", "message": str(e)}}))
            return
        if self.mode == "oneshot":
            task = asyncio.create_task(self._handle_and_confirm(batch))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            await _respond(send, 200, b"null")
            return
        await _respond(send, 200, _encode(await self.handle(batch)))

    def _signature_problem(self, scope: Scope, body: bytes) -> str | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        candidates = self._secrets
        if candidates is None:
            sid = headers.get("x-tidings-subscription", "")
            candidates = self._sub_secrets.get(int(sid)) if sid.isascii() and sid.isdigit() and len(sid) < 20 else None
            if not candidates:
                return f"no secret is known for subscription {sid[:20]!r}"
        try:
            webhooks.verify(candidates, headers, body, int(time.time()), self.tolerance_s)
        except webhooks.WebhookVerificationError as e:
            return e.reason
        return None

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _jsonable(v: Any) -> bool:
    try:
        _encode(v)
    except (TypeError, msgspec.EncodeError):
        return False
    return True


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    })
    await send({"type": "http.response.body", "body": body})
