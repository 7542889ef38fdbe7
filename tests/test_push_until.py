"""A push leaves only while its lease is surely held, judged as its first byte leaves.

With broadcasters sharing a store, a push is gated on the lease being surely this
process's (``Leases.may_act``). Between that gate and the socket's write lie a name
look-up, a connection's set-up and task switches: a process stopped (SIGSTOP, a paused
VM, starved of CPU) in there would push after another broadcaster took the subscription
over, under an older lease epoch. So the lease's sure end also travels to ``Outbound``,
which checks it as the request's first byte is about to leave (head and body leave in one
write), and a push too late sends nothing at all.

The time that passes is made here by a name look-up that takes longer than the lease has
left: the same instruction a stop would fall on.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from tidings.broker import Broker
from tidings.broker.delivery._notes import NOT_SENT, Note
from tidings.broker.delivery._push import Push
from tidings.broker.delivery._tail import Tail
from tidings.broker.replay._pusher import Pusher
from tidings.broker.replay._pusher_wire import Step
from tidings.core.config import SubscriptionConfig
from tidings.core.netpolicy import AddressPolicy
from tidings.core.retry import Outcome
from tidings.core.wire import Event, PublicationRegistration, SubscriptionRegistration
from tidings.outbound import Answer, Outbound
from tidings.settings import Settings
from tidings.store import PrincipalRecord, SQLiteStore, StoredEvent, SubscriptionRecord
from tidings.store.range_reader import open_range_reader

from .conftest import eventually, read_body, respond

ADMIN = PrincipalRecord(name="admin", admin=True)


class SlowNames(AbstractResolver):
    """Resolves every name to 127.0.0.1, after ``delay_s``."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[
        ResolveResult
    ]:
        await asyncio.sleep(self.delay_s)
        return [ResolveResult(hostname=host, host="127.0.0.1", port=port, family=socket.AF_INET, proto=0,
                              flags=socket.AI_NUMERICHOST)]

    async def close(self) -> None:
        pass


class Counting:
    """An endpoint that counts the requests whose head reached it, and their bodies."""

    def __init__(self) -> None:
        self.heads = 0
        self.bodies: list[bytes] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.heads += 1
        self.bodies.append(await read_body(receive))
        await respond(send, 200, b"null")


def at(t: float) -> Callable[[], float]:
    """An ``until`` that stays where it is."""
    return lambda: t


def _slow_url(url: str) -> str:
    """The endpoint's URL with a name for its host, so that the call looks it up."""
    return url.replace("127.0.0.1", "slow.test")


async def test_a_call_whose_until_passes_before_its_first_byte_sends_nothing(endpoints: Any) -> None:
    ep = Counting()
    url = _slow_url((await endpoints(ep)).url)
    json = {"content-type": "application/json"}
    async with Outbound(AddressPolicy(restricted=False), resolver=SlowNames(0.3)) as out:
        late = await out.post(url, b"[1]", json, timeout_s=5, max_bytes=100, until=at(time.monotonic() + 0.1))
        past = await out.post(url, b"[2]", json, timeout_s=5, max_bytes=100, until=at(time.monotonic() - 1))
        await asyncio.sleep(0.2)
        assert (late.code, late.status, past.code) == ("too_late", None, "too_late")
        assert ep.heads == 0
        on_time = await out.post(url, b"[3]", json, timeout_s=5, max_bytes=100, until=at(time.monotonic() + 5))
        unbounded = await out.post(url, b"[4]", json, timeout_s=5, max_bytes=100, until=at(float("inf")))
    assert (on_time.code, unbounded.code) == ("ok", "ok")
    assert ep.bodies == [b"[3]", b"[4]"]


class ShortLease:
    """Leases of a member that surely holds every subscription for ``left_s`` more."""

    def __init__(self, left_s: float) -> None:
        self.until = time.monotonic() + left_s

    def may_act(self, sub_id: int) -> bool:
        return time.monotonic() < self.until

    def acts_until(self, sub_id: int) -> float:
        return self.until if self.may_act(sub_id) else 0.0

    async def until_may_act(self, sub_id: int) -> None:
        raise AssertionError("the gate was passed: the lease was held then")

    def fence(self, sub_id: int) -> None:
        return None

    def lost(self, sub_id: int) -> None:
        pass


def _one_push(url: str) -> tuple[SubscriptionRecord, Note]:
    """A subscription pushing to ``url`` and one notification for it."""
    sub = SubscriptionRecord(id=7, subscriber="s", namespace="p.x", endpoint=url)
    return sub, Note(1, StoredEvent(seq=1, namespace="p.x", id=1, prev_id=None, timestamp=1, source="a",
                                    data=b'{"Nat":1}', headers=b"[]"))


async def test_a_push_whose_lease_ends_before_its_bytes_leave_sends_nothing(endpoints: Any) -> None:
    ep = Counting()
    url = _slow_url((await endpoints(ep)).url)
    sub, note = _one_push(url)
    async with Outbound(AddressPolicy(restricted=False), resolver=SlowNames(0.3)) as out:
        push = Push(Settings(), Tail(0), out, signer=None, leases=ShortLease(0.1), fence_of=lambda _: None)
        outcome, _, reason, _ = await push.post(sub, [note], SubscriptionConfig())
        await asyncio.sleep(0.2)
        assert (outcome, reason) == (Outcome.NO_ANSWER, NOT_SENT)
        assert ep.heads == 0
        push = Push(Settings(), Tail(0), out, signer=None, leases=ShortLease(5), fence_of=lambda _: None)
        outcome, _, reason, _ = await push.post(sub, [note], SubscriptionConfig())
    assert outcome is Outcome.ACK
    assert ep.heads == 1


class RenewedLease(ShortLease):
    """A lease with ``left_s`` more at first, renewed for 5 s by a heartbeat after ``renew_after_s``."""

    def __init__(self, left_s: float, renew_after_s: float) -> None:
        super().__init__(left_s)
        self.renew_at = time.monotonic() + renew_after_s

    def acts_until(self, sub_id: int) -> float:
        if time.monotonic() >= self.renew_at:
            self.until = max(self.until, self.renew_at + 5)
        return super().acts_until(sub_id)


async def test_a_lease_renewed_while_the_push_connects_lets_it_leave(endpoints: Any) -> None:
    """The sure end is read as the first byte is about to leave, not when the push began:
    a heartbeat that renewed the lease during a slow connection counts."""
    ep = Counting()
    url = _slow_url((await endpoints(ep)).url)
    sub, note = _one_push(url)
    async with Outbound(AddressPolicy(restricted=False), resolver=SlowNames(0.3)) as out:
        push = Push(Settings(), Tail(0), out, signer=None, leases=RenewedLease(0.1, 0.05), fence_of=lambda _: None)
        outcome, _, reason, _ = await push.post(sub, [note], SubscriptionConfig())
    assert (outcome, reason) == (Outcome.ACK, "ok")
    assert ep.heads == 1


async def test_a_replay_step_whose_lease_ends_before_its_bytes_leave_sends_nothing(
    tmp_path: Path, endpoints: Any
) -> None:
    """The replay process too: its step carries the lease's sure end to the last moment."""
    from bench.archive import generate

    await asyncio.to_thread(generate, tmp_path, 100, 1)
    ep = Counting()
    url = _slow_url((await endpoints(ep)).url)
    reader = await open_range_reader(f"sqlite://{tmp_path / 'tidings.db'}")
    step = dict(
        replay=1, namespace="bench.ns0", after=0, before=101, from_id=1, base=1000, pairs=b"", filter=None,
        skip=None, batch=100, sub=7, endpoint=url, mode="trusted", echo_filter=None, cloudevents=None,
        deadline_s=5.0, epoch=3, secrets=[], clock_offset_ns=0,
    )
    try:
        async with Outbound(AddressPolicy(restricted=False), resolver=SlowNames(0.3)) as out:
            pusher = Pusher(Settings(), reader, out)
            late = await pusher.step(Step(req=1, act_until=time.monotonic() + 0.1, **step))  # type: ignore[arg-type]
            await asyncio.sleep(0.2)
            assert (late.whole, late.code) == (False, NOT_SENT)
            assert [e.id for e in late.events] == list(range(1, 101))  # handed back whole
            assert ep.heads == 0
            on_time = await pusher.step(Step(req=2, act_until=time.monotonic() + 5, **step))  # type: ignore[arg-type]
            assert on_time.whole and ep.heads == 1
    finally:
        await reader.close()


class Script:
    """An endpoint that answers 200 and records each push's event ids."""

    def __init__(self) -> None:
        self.pushes: list[list[int]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        import json

        self.pushes.append([n["eventId"] for n in json.loads(await read_body(receive))])
        await respond(send, 200, b"null")


@pytest.mark.parametrize("direct", [True, False], ids=["push-first", "record-first"])
async def test_a_push_that_sent_nothing_is_not_a_try(tmp_path: Path, endpoints: Any, direct: bool) -> None:
    """With one try allowed, a push answered ``too_late`` (nothing left) must not use it
    up: the batch is pushed again once the lease allows, and nothing is dead-lettered."""
    ep = Script()
    settings = Settings(data_dir=tmp_path, max_attempts=1, push_before_record=direct, retry_initial_s=0.01,
                        retry_max_s=0.02)
    async with Broker(settings, SQLiteStore(tmp_path / "tidings.db")) as broker:
        outbound = broker.delivery._push.outbound
        real = outbound.post
        refused: list[str] = []

        async def too_late_once(url: str, body: bytes, headers: dict[str, str], **kw: Any) -> Answer:
            if not refused:
                refused.append(url)
                return Answer(NOT_SENT)
            return await real(url, body, headers, **kw)

        outbound.post = too_late_once  # type: ignore[method-assign]
        orch = broker.orchestrator
        await orch.register_publications(ADMIN, [PublicationRegistration(namespace="p.x")])
        url = (await endpoints(ep)).url
        (r,) = await orch.register_subscriptions(ADMIN, [SubscriptionRegistration(
            namespace="p.x", endpoint=url, config=[["tidings:subscription:reliable", {"Bool": True}]],
        )])
        await broker.broadcaster.publish(ADMIN, [Event(namespace="p.x", data={"Nat": 1})])
        await eventually(lambda: ep.pushes)
        assert refused == [url]
        assert ep.pushes == [[1]]
        await asyncio.sleep(0.1)
    with contextlib.closing(sqlite3.connect(tmp_path / "tidings.db")) as c:
        assert c.execute("SELECT COUNT(*) FROM dead_letters").fetchone() == (0,)
        assert c.execute("SELECT COUNT(*) FROM notifications").fetchone() == (0,)  # confirmed
    assert r.Ok is not None
