"""The ICRC-77 replay methods (standard names) and tidings' replay-credit methods."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..broker import Broker
from ..core.wire_replay import (
    CreditFunding,
    ReplayQuery,
    ReplayRegistration,
    ReplayResult,
    ReplayStatus,
    ReplayStatusUpdate,
    replay_err,
)
from ..store import PrincipalRecord
from ._method import Method

__all__ = ["REPLAY_METHODS"]

_RESULTS = list[ReplayResult | None]


def _batch(fn: Callable[[Broker, PrincipalRecord, Any], Awaitable[list[ReplayResult]]]) -> Any:
    async def call(b: Broker, c: PrincipalRecord, a: list[Any]) -> list[ReplayResult]:
        limit = b.settings.max_batch_items
        if len(a) > limit:
            return [replay_err("GenericBatchError", f"a batch holds at most {limit} items")] * len(a)
        return await fn(b, c, a)

    return call


REPLAY_METHODS: list[Method] = [
    Method(
        "icrc77_register_replay", list[ReplayRegistration], _RESULTS,
        _batch(lambda b, c, a: b.replays.register(c, a)),
        "Replay [from, to) of a namespace to the caller's subscription; Ok is the replay id.",
    ),
    Method(
        "icrc77_cancel_replay", list[int], _RESULTS,
        _batch(lambda b, c, a: b.replays.cancel(c, a)),
        "Stop replays from sending more (what was sent stays sent); Ok is the replay id.",
    ),
    Method(
        "icrc77_replay_status", list[ReplayStatusUpdate], _RESULTS,
        _batch(lambda b, c, a: b.replays.status_updates(c, a)),
        "A publisher (or admin) reports replays completed, canceled or errored; tidings stops them.",
    ),
    Method(
        "icrc77_get_replays", ReplayQuery, list[ReplayStatus],
        lambda b, c, a: b.replays.query(c, a),
        "Replays by id after prev (at most take), filtered by namespace, state or requester, with progress.",
        ReplayQuery(),
    ),
    Method(
        "tidings_fund_replay_credit", list[CreditFunding], _RESULTS,
        _batch(lambda b, c, a: b.replays.fund(c, a)),
        "Add (or with a negative amount take) replay credit; Ok is the new balance (admin only).",
    ),
    Method(
        "tidings_get_replay_credit", list[str], _RESULTS,
        _batch(lambda b, c, a: b.replays.balances(c, a)),
        "Principals' replay credit and what their active replays hold of it (own, or any for admins).",
    ),
]
