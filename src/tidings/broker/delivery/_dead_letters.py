"""Dead letters: notifications given up on, which their subscriber can list, redrive or drop.

A notification is dead-lettered when a reliable subscription has tried it
``max_attempts`` times or for ``max_age`` without a confirmation, or at once when a
subscription that is not reliable is configured with ``onError = "deadletter"``. Its
subscription's delivery then moves on. Redriving makes it pending again under the same
notification id; its worker sends it before new events.

When delivery ends a subscription (``410 Gone``: ``endpoint_gone``; an error answer to a
subscription that is not reliable: ``subscription_ended``), its pending notifications
become dead letters that outlive it: its subscriber still lists and drops them; they
cannot be redriven (there is nothing to send them to).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...core.wire import DeadLetterInfo, DeadLetterQuery, ItemResult, err, ok
from ...store import DeadLetter, PrincipalRecord, Stat, Store
from ..registry import Orchestrator
from ._delivery import Delivery

__all__ = ["DeadLetters"]

_DEFAULT_TAKE, _MAX_TAKE = 100, 1000


class DeadLetters:
    def __init__(self, store: Store, orchestrator: Orchestrator, delivery: Delivery) -> None:
        self._store = store
        self._orch = orchestrator
        self._delivery = delivery

    def _mine(self, caller: PrincipalRecord) -> list[int]:
        return [i for i, s in self._orch.subscriptions.items() if self._orch.controls_subscription(caller, s)]

    async def query(self, caller: PrincipalRecord, q: DeadLetterQuery) -> list[DeadLetterInfo]:
        """``tidings_get_dead_letters``: those of the subscriptions the caller controls."""
        take = _DEFAULT_TAKE if q.take is None else max(0, min(q.take, _MAX_TAKE))
        if q.subscription is not None:
            sub = self._orch.subscriptions.get(q.subscription)
            if sub is None:  # ended: its subscriber's (listed by subscriber, then narrowed)
                ended = await self._store.list_dead_letters([], q.prev, None, ended_of=caller.name)
                letters = [d for d in ended if d.subscription_id == q.subscription][:take]
            elif self._orch.controls_subscription(caller, sub):
                letters = await self._store.list_dead_letters([q.subscription], q.prev, take)
            else:
                letters = []
        else:
            letters = await self._store.list_dead_letters(self._mine(caller), q.prev, take, ended_of=caller.name)
        return [
            DeadLetterInfo(
                id=d.id, subscription=d.subscription_id, subscriber=d.subscriber, namespace=d.namespace,
                eventId=d.event_id, attempts=d.attempts, reason=d.reason, timestamp=d.dead_at,
            )
            for d in letters
        ]

    async def _resolve(
        self, caller: PrincipalRecord, ids: Sequence[int], *, redrive: bool
    ) -> tuple[list[ItemResult | None], dict[int, DeadLetter]]:
        """Per id: None if the caller may act on it, else the error; and the letters it may."""
        found = {d.id: d for d in await self._store.list_dead_letters(None)} if ids else {}
        out: list[ItemResult | None] = []
        allowed: dict[int, DeadLetter] = {}
        for i in ids:
            d = found.get(i)
            sub = self._orch.subscriptions.get(d.subscription_id) if d is not None else None
            if d is not None and sub is None and d.subscriber == caller.name and not redrive:
                out.append(None)  # of a subscription that ended: its subscriber may drop it
                allowed[i] = d
            elif d is None or sub is None:
                out.append(err("NotFound", f"no dead letter {i}"))
            elif not self._orch.controls_subscription(caller, sub):
                out.append(err("Unauthorized", f"dead letter {i} is not of a subscription of {caller.name}"))
            else:
                out.append(None)
                allowed[i] = d
        return out, allowed

    @staticmethod
    def _answer(ids: Sequence[int], refused: list[ItemResult | None], done: set[int]) -> list[ItemResult | None]:
        return [r if r is not None else ok(True) if i in done else err("NotFound", f"no dead letter {i}")
                for i, r in zip(ids, refused, strict=True)]

    async def redrive(self, caller: PrincipalRecord, ids: Sequence[int]) -> list[ItemResult | None]:
        """``tidings_redrive_dead_letters``: send them again."""
        refused, allowed = await self._resolve(caller, ids, redrive=True)
        back = await self._store.redrive_dead_letters(list(allowed), self._delivery.now_ns())
        self._delivery.redrive(back)
        return self._answer(ids, refused, {p.id for p in back})

    async def drop(self, caller: PrincipalRecord, ids: Sequence[int]) -> list[ItemResult | None]:
        """``tidings_drop_dead_letters``: delete them for good (counted as dropped)."""
        refused, allowed = await self._resolve(caller, ids, redrive=False)
        stats = [
            Stat(scope, key, f"tidings:{scope}:stats:dropped")
            for d in allowed.values()
            for scope, key in (("subscription", str(d.subscription_id)), ("subscriber", d.subscriber))
        ]
        gone = set(await self._store.drop_dead_letters(list(allowed), stats))
        return self._answer(ids, refused, gone)
