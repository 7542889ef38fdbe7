"""The flow of one replay: one read ahead of the batch being recorded and pushed, and
at most one push in flight (:mod:`._replays`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import msgspec

from ...core.replay import kept_id
from ...core.retry import Outcome
from ...store import ReplayRecord, Stat, Store, StoredEvent, SubscriptionRecord
from ..delivery import Delivery, Note, Pushed, counted, taken_whole
from ._pusher_wire import Stepped
from ._remote import PusherUnavailable, RemotePusher

__all__ = ["InFlight", "replayed"]

log = logging.getLogger("tidings.replay")
_decode = msgspec.json.Decoder().decode


class InFlight:
    """At most one push of a replay in flight: the next batch is read and recorded
    meanwhile, and batches still arrive in order.

    A batch goes one of two ways:

    * :meth:`send`: recorded first (pending notifications with their event copies, the
      position moved), then pushed through the subscription's retries;
    * :meth:`send_direct` (a ``trusted`` subscription, a replay with no price): pushed
      first, under the ids the replay keeps (``Store.replay_id_base``), and once the
      endpoint confirms it, recorded as delivered with the position moved, in one write.
      No pending row, event copy, deletion or sweep per event. A crash before that write
      leaves the position where it was, so the batch is pushed again under the same
      notification ids: at least once, as before. That write runs while the next batch
      is pushed. A batch the endpoint does not take whole is recorded the first way,
      under the same ids, and its retries go on from that first answer.
      docs/benchmarks/history/2026-11-26-07-hot-replay-without-rows.md.

    The position only moves in push order: a recorded batch waits for the direct push
    before it (:meth:`send`), whose position is written only once it is confirmed."""

    def __init__(self, delivery: Delivery, store: Store, rec: ReplayRecord, stopped: Callable[[], bool]) -> None:
        self._delivery = delivery
        self._store = store
        self._rec = rec
        self._stopped = stopped
        """Canceled or stopped from outside: nothing more is pushed."""
        self._task: asyncio.Task[bool] | None = None
        self._direct = False
        self._base: int | None = None
        self._last_direct: asyncio.Task[bool] | None = None
        self._recording: asyncio.Task[bool] | None = None
        """The last confirmed batch's record, written while the next batch is pushed; at
        most one at a time, so positions move in order and a crash repeats at most the
        batch in flight and the one before it."""
        self._last_record: asyncio.Task[bool] | None = None  # kept for direct_done once drained

    async def send(self, sub: SubscriptionRecord, copies: list[StoredEvent], position: int, now: int) -> bool | None:
        """Record ``copies`` and start pushing them once the previous push is done. None
        when the store refused the batch (the replay is no longer running, or the
        subscription is gone); False if the previous push found the subscription gone."""
        if self._direct and not await self.drain():
            return False  # a direct push's position is written when it is confirmed: keep the order
        ids = await self._record(sub, copies, position, now)
        if ids is None:
            return None
        if not ids:
            return True
        if not await self.wait():
            return False
        await self._delivery.gate.turn(len(ids))  # live pushes first: docs/replay.md, "Live work first"
        self._direct = False
        self._task = asyncio.create_task(self._delivery.push(sub.id, list(zip(ids, copies, strict=True)), now))
        return True

    async def send_direct(self, sub: SubscriptionRecord, copies: list[StoredEvent], position: int, now: int) -> bool:
        """Push ``copies`` under their kept ids once the previous push is done, and record
        them when confirmed; False if the previous push found the subscription gone or
        its batch refused."""
        rec = self._rec
        if self._base is None:
            self._base = await self._store.replay_id_base(rec.id, rec.to_id - rec.from_id)
        ids = [kept_id(self._base, rec.from_id, e.id) for e in copies]
        if not await self.wait():
            return False
        if self._recording is not None and self._recording.done() and not self._recording.result():
            return False  # (result() raises what writing a record raised)
        await self._delivery.gate.turn(len(copies))  # live pushes first: docs/replay.md, "Live work first"
        if self._stopped():
            return True  # canceled while the previous push was out: this batch is not sent
        self._direct = True
        self._task = self._last_direct = asyncio.create_task(
            self._push_direct(sub, list(zip(ids, copies, strict=True)), position, now)
        )
        return True

    async def send_remote(self, pusher: RemotePusher, sub: SubscriptionRecord, step: dict[str, Any]) -> int | None:
        """Have the replay process (``_pusher``) push the next batch after ``step["after"]``
        once the previous push is done, and record it as :meth:`send_direct` does; the
        position reached, the same position when nothing was pushed (stopped, or the
        process failed: :attr:`remote_failed`), or None if the subscription is gone."""
        rec = self._rec
        if self._base is None:
            self._base = await self._store.replay_id_base(rec.id, rec.to_id - rec.from_id)
        if not await self.wait():
            return None
        if self._recording is not None and self._recording.done() and not self._recording.result():
            return None
        await self._delivery.gate.turn(step["batch"])  # live pushes first: docs/replay.md, "Live work first"
        if self._stopped():
            return step["after"]  # canceled meanwhile: this batch is not sent
        self._direct = True
        self.reached = step["after"]
        # Kept as the push in flight too: a shutdown cancels it with the replay (``cancel``).
        task = self._task = self._last_direct = asyncio.create_task(
            self._push_remote(pusher, sub, {**step, "base": self._base})
        )
        if not await task:
            return None
        return self.reached

    async def _push_remote(self, pusher: RemotePusher, sub: SubscriptionRecord, step: dict[str, Any]) -> bool:
        d, rec, now = self._delivery, self._rec, step.pop("now")
        try:
            got = await pusher.step(**step)
        except PusherUnavailable as e:
            self.remote_failed = True  # the broker pushes this batch itself, under the same ids
            log.warning("replay %s: %s; going on in the broker", rec.id, e)
            return True
        base, from_id = step["base"], rec.from_id
        if got.whole:
            d.metrics.notifications_sent += len(got.ids)
            before, self._recording = self._recording, None
            if before is not None and not await before:
                return False
            # The records are made and written while the process pushes the next batch.
            self._recording = self._last_record = asyncio.create_task(self._confirm_remote(sub, got, base, now))
            self.reached = got.position
            return True
        pushed: Pushed | None = None if got.outcome is None else (
            Outcome(got.outcome), None if got.answer is None else _decode(got.answer), got.code, got.retry_after
        )
        recording, self._recording = self._recording, None
        if recording is not None and not await recording:
            return False
        copies = got.events
        ids = await self._record(sub, copies, got.position, now, [kept_id(base, from_id, e.id) for e in copies])
        self.reached = got.position
        return ids is not None and await d.push(sub.id, list(zip(ids, copies, strict=True)), now, pushed)

    async def _confirm_remote(self, sub: SubscriptionRecord, got: Stepped, base: int, now: int) -> bool:
        rec = self._rec
        ns, from_id = rec.namespace, rec.from_id
        pairs = [
            (kept_id(base, from_id, i), StoredEvent(seq=q, namespace=ns, id=i, prev_id=None, timestamp=t, source=src,
                                             data=b"", headers=b""))
            for q, i, src, t in zip(got.seqs, got.ids, got.sources, got.timestamps, strict=True)
        ]
        return await self._confirm(sub, pairs, got.position, now)

    remote_failed = False
    """The replay process could not make a step: the broker pushes its next read itself
    (from the recorded position, under the same ids), then asks the process again."""
    reached = 0
    """The position the last step of the replay process reached."""

    async def direct_done(self, timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until the last batch pushed before being
        recorded is answered and recorded."""
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        pushed = self._last_direct
        if pushed is not None and not pushed.done():
            await asyncio.wait([pushed], timeout=timeout)
        recording = self._last_record  # set once that push was answered
        if recording is not None and not recording.done() and loop.time() < until:
            await asyncio.wait([recording], timeout=until - loop.time())

    async def wait(self) -> bool:
        """Wait for the push in flight; False if it found the subscription gone."""
        task, self._task = self._task, None
        return True if task is None else await task

    async def drain(self) -> bool:
        """Wait for the push in flight and the records still being written."""
        pushed = await self.wait()
        recording, self._recording = self._recording, None
        return (True if recording is None else await recording) and pushed

    def cancel(self) -> None:
        for task in (self._task, self._recording):
            if task is not None:
                task.cancel()

    async def _record(
        self, sub: SubscriptionRecord, copies: list[StoredEvent], position: int, now: int,
        kept: list[int] | None = None,
    ) -> list[int] | None:
        rec = self._rec
        stats = replayed(sub, len(copies))
        ids = await self._store.record_replay_batch(
            rec.id, sub.id, copies, position, stats, now=now, ids=kept, fence=self._delivery.fence_of(sub.id)
        )
        if ids is not None:
            rec.position, rec.sent = position, rec.sent + len(ids)
        return ids

    async def _push_direct(
        self, sub: SubscriptionRecord, pairs: list[tuple[int, StoredEvent]], position: int, now: int
    ) -> bool:
        d = self._delivery
        w = d.worker(sub.id)
        if w is None:
            return False
        pushed = await w.push_once([Note(i, e, 0, now) for i, e in pairs]) if pairs else None
        if not pairs or taken_whole(pushed, len(pairs)):
            d.metrics.notifications_sent += len(pairs)
            # Written while the next batch is pushed, once the record before it is: a
            # crash before it commits pushes this batch again, beside the one in flight.
            before, self._recording = self._recording, None
            if before is not None and not await before:
                return False
            self._recording = self._last_record = asyncio.create_task(self._confirm(sub, pairs, position, now))
            return True
        # Not taken whole (an Err item, an error or no answer, back-pressure, 410, stopped):
        # recorded as pending under the same ids, then the subscription's own path goes on
        # from this answer as the first try, as it would for a live batch.
        recording, self._recording = self._recording, None
        if recording is not None and not await recording:
            return False
        copies = [e for _, e in pairs]
        ids = await self._record(sub, copies, position, now, [i for i, _ in pairs])
        return ids is not None and await d.push(sub.id, list(zip(ids, copies, strict=True)), now, pushed)

    async def _confirm(
        self, sub: SubscriptionRecord, pairs: list[tuple[int, StoredEvent]], position: int, now: int
    ) -> bool:
        """Record a batch the endpoint took whole."""
        rec, n = self._rec, len(pairs)
        stats = replayed(sub, n)
        if n:
            per_ns = {rec.namespace: n}
            stats += [*counted(sub, per_ns, "confirmations"), *counted(sub, per_ns, "notifications")]
        if not await self._store.record_replay_confirmed(
            rec.id, sub.id, pairs, position, stats, created_at=now, now=self._delivery.now_ns(),
            fence=self._delivery.fence_of(sub.id),
        ):
            return False
        rec.position, rec.sent = position, rec.sent + n
        return True


def replayed(sub: SubscriptionRecord, n: int) -> list[Stat]:
    """The counters of ``n`` events replayed to ``sub``."""
    if not n:
        return []
    return [
        Stat("subscription", str(sub.id), "icrc77:subscription:stats:replayed", n),
        Stat("subscriber", sub.subscriber, "icrc77:subscriber:stats:replayed", n),
    ]
