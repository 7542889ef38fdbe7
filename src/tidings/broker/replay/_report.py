"""A replay's ICRC-77 status report: its state and statistics, from its stored record."""

from __future__ import annotations

from typing import Any

from ...core.wire_replay import ReplayStatus, state_of
from ...store import ReplayRecord

__all__ = ["status_of"]


def status_of(r: ReplayRecord, pending: int, dead: int) -> ReplayStatus:
    reached = r.position - r.from_id + 1
    stats: dict[str, int] = {
        "icrc77:replay:stats:expected": r.expected,
        "icrc77:replay:stats:reached": reached,
        "icrc77:replay:stats:position": r.position,
        "icrc77:replay:stats:end_id": r.to_id - 1,
        "icrc77:replay:stats:sent": r.sent,
        "icrc77:replay:stats:skipped": reached - r.sent,
        "icrc77:replay:stats:pending": pending,
        "icrc77:replay:stats:deadLettered": dead,
        "icrc77:replay:stats:confirmed": r.sent - pending - dead,
        "icrc77:replay:stats:price": r.price,
        "icrc77:replay:stats:charged": r.charged,
        "icrc77:replay:stats:created_at": r.created_at,
        "icrc77:replay:stats:updated_at": r.updated_at,
    }
    pairs: list[tuple[str, Any]] = [(k, {"Nat": v}) for k, v in stats.items()]
    if r.memo is not None:
        pairs.append(("icrc77:replay:memo", {"Blob": r.memo}))
    return ReplayStatus(
        replayId=r.id, namespace=r.namespace, config=[(p[0], p[1]) for p in r.config], stats=pairs,
        range=(r.from_id, None if r.open_end else r.to_id), status=state_of(r.state, r.sent, r.detail),
        requester=r.requester, subscription=r.subscription_id,
    )

