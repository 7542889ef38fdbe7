from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from msgspec import UNSET, structs

from ..core.wire_replay import (
    CreditBalance,
    CreditFunding,
    ReplayFilter,
    ReplayQuery,
    ReplayRegistration,
    ReplayResult,
    ReplayState,
    ReplayStatus,
    ReplayStatusUpdate,
)
from ._errors import ItemError
from ._http import Connection

_RESULTS = list[ReplayResult | None]
_FILTER = "icrc72:subscription:filter"
_SKIP = "icrc72:subscription:skip"
_SUBSCRIPTION = "icrc77:replay:subscription"


def replay_result(result: ReplayResult | None) -> Any:
    """The ``Ok`` value of a replay item result, or :class:`ItemError` for ``Err``."""
    if result is None:
        raise ItemError("GenericBatchError", "the item was not processed")
    if result.Err is not UNSET:
        code = result.Err.code
        raise ItemError(code, structs.asdict(result.Err)[code])
    return result.Ok


class Replays:
    """ICRC-77 replays: ask for a range of a namespace again, watch it, cancel it.

    The replay goes to one of the caller's subscriptions covering the namespace (the
    first, or ``subscription``), filtered and skipped as that subscription is unless
    ``filter``/``skip`` are given. ::

        async with Replays("http://127.0.0.1:8072", token) as replays:
            rid = await replays.register("com.example.orders", 1000, 2000, filter="total > 10")
            status = await replays.status(rid)      # status.status.name: pending, running, ...
    """

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self._conn = Connection(url, token, timeout=timeout)

    async def __aenter__(self) -> Replays:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._conn.close()

    async def _batch(self, method: str, items: Sequence[Any]) -> builtins.list[Any]:
        return [replay_result(r) for r in await self._conn.call(method, builtins.list(items), _RESULTS)]

    async def register(
        self,
        namespace: str,
        start: int,
        end: int | None = None,
        *,
        filter: str | None = None,
        skip: int | tuple[int, int] | None = None,
        subscription: int | None = None,
        config: Sequence[tuple[str, Any]] = (),
        memo: str | None = None,
    ) -> int:
        """Replay ``[start, end)`` of ``namespace`` (``end`` None: up to the last event now);
        return the replay id, or raise :class:`ItemError` (``PaymentRequired``, ...)."""
        pairs: builtins.list[tuple[str, Any]] = builtins.list(config)
        if filter is not None:
            pairs.append((_FILTER, {"Text": filter}))
        if skip is not None:
            mod, offset = (skip, 0) if isinstance(skip, int) else skip
            pairs.append((_SKIP, {"Array": [{"Nat": mod}, {"Nat": offset}]}))
        if subscription is not None:
            pairs.append((_SUBSCRIPTION, {"Nat": subscription}))
        reg = ReplayRegistration(namespace=namespace, range=(start, end), config=pairs, memo=memo)
        (rid,) = await self._batch("icrc77_register_replay", [reg])
        return int(rid)

    async def register_batch(self, regs: Sequence[ReplayRegistration]) -> builtins.list[ReplayResult | None]:
        """``icrc77_register_replay`` as it is: one result per item, errors not raised."""
        return await self._conn.call("icrc77_register_replay", builtins.list(regs), _RESULTS)

    async def cancel(self, *replay_ids: int) -> None:
        """Stop replays from sending more; raises :class:`ItemError` for the first refused."""
        await self._batch("icrc77_cancel_replay", replay_ids)

    async def report(self, replay_id: int, status: ReplayState) -> None:
        """``icrc77_replay_status``: as a publisher of the namespace, end a replay."""
        await self._batch("icrc77_replay_status", [ReplayStatusUpdate(replayId=replay_id, status=status)])

    async def list(
        self,
        *,
        prev: int | None = None,
        take: int | None = None,
        namespace: str | None = None,
        state: str | None = None,
        requester: str | None = None,
    ) -> builtins.list[ReplayStatus]:
        f = None
        if namespace is not None or state is not None or requester is not None:
            f = ReplayFilter(namespace=namespace, state=state, requester=requester)
        return await self._conn.call(
            "icrc77_get_replays", ReplayQuery(prev=prev, take=take, filter=f), builtins.list[ReplayStatus]
        )

    async def status(self, replay_id: int) -> ReplayStatus | None:
        found = await self.list(prev=replay_id - 1, take=1)
        return found[0] if found and found[0].replayId == replay_id else None

    async def fund(self, principal: str, amount: int) -> int:
        """Add replay credit to a principal (admin); return the new balance."""
        (balance,) = await self._batch(
            "tidings_fund_replay_credit", [CreditFunding(principal=principal, amount=amount)]
        )
        return int(balance)

    async def credit(self, principal: str) -> CreditBalance:
        (r,) = await self._conn.call("tidings_get_replay_credit", [principal], _RESULTS)
        value = replay_result(r)
        return CreditBalance(principal=value["principal"], balance=value["balance"], reserved=value["reserved"])
