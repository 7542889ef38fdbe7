"""``icrc72_confirm_notifications``: a subscriber settles its own notifications, item by item.

Only the subscriber a notification was issued to may confirm it, whether it is still
pending or already confirmed (or dead-lettered). Every other id (another principal's
notification, pending or not, or an id never issued) is refused with one and the same
error, so the answer tells a caller nothing about notifications that are not its own:
not whether they exist, nor whether they were confirmed. Confirming one's own
notification again is idempotent (``Ok``) as long as the store's delivery record of it
is kept (docs/pipeline.md: the archive job trims it by age); past that it is refused like
any id that is not the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from ...core.wire import ConfirmResult, ItemResult, err, ok
from ...store import PendingNotification, PrincipalRecord, Stat, SubscriptionRecord
from ._ports import ConfirmHub

__all__ = ["confirm"]


async def confirm(
    d: ConfirmHub, caller: PrincipalRecord, ids: Sequence[int], subscriptions: Mapping[int, SubscriptionRecord]
) -> ConfirmResult:
    unique = list(dict.fromkeys(ids))
    pending = {p.id: p for p in await d.store.get_notifications(unique)}
    rest = [i for i in unique if i not in pending]
    former = await d.store.former_subscribers(rest) if rest else {}
    results: list[ItemResult | None] = []
    mine: dict[int, PendingNotification] = {}
    for i in ids:
        p = pending.get(i)
        if p is not None:
            sub = subscriptions.get(p.subscription_id)
            owned = sub is not None and sub.subscriber == caller.name
        else:
            owned = former.get(i) == caller.name
        if not owned:
            results.append(err("Unauthorized", f"{caller.name} has no notification {i} to confirm"))
            continue
        if p is not None:
            mine[i] = p
        results.append(ok())  # confirming again is idempotent
    if mine:
        stats: dict[int, list[Stat]] = {}
        sent: dict[int, list[Stat]] = {}
        for p in mine.values():
            sub = subscriptions[p.subscription_id]
            stats[p.id], sent[p.id] = (
                [
                    Stat("subscription", str(sub.id), f"icrc72:subscription:stats:{name}"),
                    Stat("subscriber", sub.subscriber, f"icrc72:subscriber:stats:{name}"),
                    Stat("publication", p.namespace, f"icrc72:publication:stats:{name}"),
                ]
                for name in ("confirmations", "notifications")
            )
        # A notification confirmed before its push's answer was counted as sent is counted
        # now (it evidently arrived); the store counts each once.
        settled = await d.store.settle_notifications(list(mine), stats, sent)
        now = d.now_ns()
        events = {e.seq: e for e in await d.store.read_seqs([mine[i].seq for i in settled])}
        d.metrics.confirmed(now, [events[mine[i].seq].timestamp for i in settled if mine[i].seq in events])
        for p in mine.values():
            w = d.worker(p.subscription_id)
            if w is not None:
                w.confirmed(p.id)
    if all(r is not None and r.Ok is not msgspec.UNSET for r in results):
        return ConfirmResult(allAccepted=None)
    return ConfirmResult(itemized=results)
