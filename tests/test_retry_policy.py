"""Back-off, Retry-After and give-up rules, with time injected so they run in milliseconds.

The broker runs in this process on a MemoryStore; its delivery's clock, sleep and random
source are replaced, and the subscriber is a real HTTP endpoint.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tidings.broker import Broker
from tidings.core.retry import Backoff, Outcome, classify, http_date_seconds, retry_after_seconds
from tidings.core.wire import Event, PublicationRegistration, SubscriptionRegistration
from tidings.settings import Settings
from tidings.store import MemoryStore, PrincipalRecord

from .conftest import eventually, read_body, respond

ADMIN = PrincipalRecord(name="admin", admin=True)


class FakeClock:
    """Sleeps return at once and move the clock; every requested delay is recorded."""

    def __init__(self) -> None:
        self.t = 1_000.0
        self.delays: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.t += seconds
        await asyncio.sleep(0)

    def monotonic(self) -> float:
        return self.t

    def now_ns(self) -> int:
        return int(self.t * 1e9)


class Scripted:
    """An endpoint answering from a script of (status, headers), then 200."""

    def __init__(self, script: list[tuple[int, dict[str, str]]]) -> None:
        self.script = list(script)
        self.pushes: list[list[int]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.pushes.append([n["id"] for n in json.loads(await read_body(receive))])
        status, headers = self.script.pop(0) if self.script else (200, {})
        await respond(send, status, b"", headers.items(), content_type=None)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[tuple[Broker, FakeClock]]:
    clock = FakeClock()
    b = Broker(Settings(data_dir=tmp_path, retry_initial_s=0.5, retry_max_s=4.0, max_attempts=6), MemoryStore())
    d = b.delivery
    d.sleep, d.monotonic, d.now_ns, d.random = clock.sleep, clock.monotonic, clock.now_ns, lambda: 0.0
    async with b:
        yield b, clock


async def _subscribe(b: Broker, url: str, config: list[Any] | None = None) -> int:
    await b.orchestrator.register_publications(ADMIN, [PublicationRegistration(namespace="t.x")])
    (r,) = await b.orchestrator.register_subscriptions(
        ADMIN, [SubscriptionRegistration(namespace="t.x", endpoint=url, config=config or [])]
    )
    return int(r.Ok)


async def _publish(b: Broker, n: int = 1) -> None:
    await b.broadcaster.publish(ADMIN, [Event(namespace="t.x", data={"Nat": i}) for i in range(n)])


NOW = 1_795_000_000.0  # a wall clock for HTTP dates, in Unix seconds


def test_classification_and_backoff_rules() -> None:
    assert classify(None) is Outcome.NO_ANSWER
    assert classify(204) is Outcome.ACK
    assert classify(410) is Outcome.GONE
    assert classify(500) is Outcome.ERROR_ANSWER and classify(301) is Outcome.ERROR_ANSWER
    # 429/503 are back-pressure only with a valid Retry-After; without one, error answers.
    assert classify(429, 7.0) is Outcome.BACK_PRESSURE and classify(503, 0.0) is Outcome.BACK_PRESSURE
    assert classify(429) is Outcome.ERROR_ANSWER and classify(500, 7.0) is Outcome.ERROR_ANSWER
    assert retry_after_seconds(429, "7", NOW) == 7.0 and retry_after_seconds(503, " 12 ", NOW) == 12.0
    assert retry_after_seconds(500, "7", NOW) is None
    for broken in ("soon", "2.5", "-1", "+3", "", " ", "1e3", "٣", "9" * 13, "Sun, 31 Feb 2026 08:00:00 GMT"):
        assert retry_after_seconds(429, broken, NOW) is None, broken
    b = Backoff(0.5, 4.0)
    assert [b.delay(n, 0.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.delay(3, 0.999) == pytest.approx(2.0 * 0.5005)  # jitter takes off up to half
    # Retry-After is honoured beyond the back-off maximum, within the cap, never below the
    # initial delay (``Retry-After: 0`` must not make a busy loop).
    assert b.pressure_delay(30.0, 600.0) == 30.0
    assert b.pressure_delay(1e12, 600.0) == 600.0
    assert b.pressure_delay(0.0, 600.0) == 0.5
    assert b.pressure_delay(30.0, -1.0) == 0.5  # a broken cap still makes no busy loop


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31)), st.sampled_from([0, 1, 2]))
def test_retry_after_http_dates_in_every_form(when: datetime, form: int) -> None:
    """RFC 9110 §5.6.7: IMF-fixdate, RFC 850 and asctime all name the same instant."""
    when = when.replace(microsecond=0, tzinfo=UTC)
    at = when.timestamp()
    if form == 0:
        text = when.strftime("%a, %d %b %Y %H:%M:%S GMT")
    elif form == 1:
        assume(abs(when.year - 2026) < 50)  # two-digit years: within 50 years of now
        text = when.strftime("%A, %d-%b-%y %H:%M:%S GMT")
    else:
        text = when.strftime("%a %b ") + f"{when.day:2d}" + when.strftime(" %H:%M:%S %Y")
    assert http_date_seconds(text, NOW) == at
    assert retry_after_seconds(503, text, NOW) == max(0.0, at - NOW)


async def test_exponential_backoff_then_dead_letter(broker, endpoints) -> None:
    b, clock = broker
    ep = await endpoints(Scripted([(500, {})] * 10))
    sub_id = await _subscribe(b, ep.url)
    await _publish(b)
    await eventually(lambda: len(ep.app.pushes) == 6)  # max_attempts
    letters = await eventually(lambda: b.store.list_dead_letters())
    assert clock.delays == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert letters[0].attempts == 6 and letters[0].subscription_id == sub_id
    assert letters[0].reason == "attempts_exhausted"
    assert await b.store.pending(sub_id) == []
    stats = await b.store.stats("subscription", str(sub_id))
    assert stats["tidings:subscription:stats:deadLetters"] == 1
    assert stats["tidings:subscription:stats:retries"] == 5  # the sixth failure was not retried
    assert "icrc72:subscription:stats:notifications" not in stats  # never taken: never sent


async def test_per_subscription_backoff_and_retry_after(broker, endpoints) -> None:
    b, clock = broker
    ep = await endpoints(Scripted([(503, {}), (429, {"Retry-After": "9"}), (500, {}), (500, {})]))
    config = [["tidings:subscription:retry:initialMs", {"Nat": 100}],
              ["tidings:subscription:retry:maxMs", {"Nat": 250}]]
    await _subscribe(b, ep.url, config)
    await _publish(b)
    await eventually(lambda: len(ep.app.pushes) == 5)
    # 503 without Retry-After is a failed try; the 429 waits what it asked for and is not
    # a try, so the back-off goes on from where it was.
    assert clock.delays == [0.1, 9.0, 0.2, 0.25]
    # The same notification every time, and then it was confirmed.
    assert len({tuple(p) for p in ep.app.pushes}) == 1

    async def settled() -> bool:
        return await b.store.pending_counts() == {}

    await eventually(settled)


async def test_back_pressure_is_not_a_failed_try(broker, endpoints) -> None:
    """429/503 with Retry-After (seconds or an HTTP date) delay the next push, within the
    cap and never below the initial delay; they neither end a subscription that is not
    reliable nor use up its attempts, and a maximum age still applies."""
    b, clock = broker
    date = email.utils.formatdate(clock.t + 45, usegmt=True)  # the fake wall clock: 45 s ahead
    script = [(429, {"Retry-After": "3"}), (503, {"Retry-After": date}), (429, {"Retry-After": "0"}),
              (503, {"Retry-After": "99999999"})] * 2
    ep = await endpoints(Scripted(script))
    config = [["tidings:subscription:reliable", {"Bool": False}], ["tidings:subscription:maxAttempts", {"Nat": 1}]]
    sub_id = await _subscribe(b, ep.url, config)
    await _publish(b)
    await eventually(lambda: len(ep.app.pushes) == 9)

    async def settled() -> bool:
        return await b.store.pending_counts() == {}

    await eventually(settled)
    assert sub_id in b.orchestrator.subscriptions
    assert await b.store.list_dead_letters() == []
    cap = b.settings.retry_after_max_s
    # The date is 42 s ahead when it is read (3 s later); read again later, it is past.
    assert clock.delays == [3.0, 42.0, 0.5, cap, 3.0, 0.5, 0.5, cap]
    stats = await b.store.stats("subscription", str(sub_id))
    assert stats.get("tidings:subscription:stats:retries", 0) == 0
    assert b.metrics.notifications_deferred == 8

    # Back-pressure for longer than the maximum age: dead-lettered for its age.
    ep2 = await endpoints(Scripted([(429, {"Retry-After": "60"})] * 100))
    config = [["tidings:subscription:maxAgeMs", {"Nat": 150_000}]]
    aged = await _subscribe(b, ep2.url, config)
    await _publish(b)
    letters = await eventually(lambda: b.store.list_dead_letters([aged]))
    assert [(d.reason, d.attempts) for d in letters] == [("max_age", 0)]
    assert len(ep2.app.pushes) == 3  # at 0, 60 and 120 s; at 180 s it was past 150 s


async def test_max_age_dead_letters_without_waiting(broker, endpoints) -> None:
    b, _ = broker
    ep = await endpoints(Scripted([(500, {})] * 10))
    config = [["tidings:subscription:maxAgeMs", {"Nat": 1500}]]
    sub_id = await _subscribe(b, ep.url, config)
    await _publish(b)
    letters = await eventually(lambda: b.store.list_dead_letters())
    # Tried at t=0, +0.5, +1.0 (1.5 s old: given up), well before max_attempts.
    assert len(ep.app.pushes) == 3 and letters[0].attempts == 3
    assert (await b.store.stats("subscription", str(sub_id)))["tidings:subscription:stats:deadLetters"] == 1


async def test_gone_ends_the_subscription(broker, endpoints) -> None:
    b, _ = broker
    ep = await endpoints(Scripted([(410, {})]))
    sub_id = await _subscribe(b, ep.url)
    await _publish(b)
    await eventually(lambda: sub_id not in b.orchestrator.subscriptions)
    assert b.metrics.subscriptions_ended == 1


class _FlakyStore(MemoryStore):
    """A store whose first ``failures`` writes a worker makes before a push fail, as a
    full disk would: recording notifications (recorded first), or setting ids aside for
    them (pushed first)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def _fail(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise OSError("disk I/O error")

    async def open_notifications(self, *args: Any, **kwargs: Any) -> Any:
        self._fail()
        return await super().open_notifications(*args, **kwargs)

    async def take_notification_ids(self, n: int) -> int:
        self._fail()
        return await super().take_notification_ids(n)


async def test_a_failing_store_write_does_not_stop_delivery(tmp_path: Path, endpoints, caplog) -> None:
    """An unexpected error in one subscription's worker is logged and the worker starts
    again from what the store holds; it neither dies nor takes the others down with it."""
    clock = FakeClock()
    b = Broker(Settings(data_dir=tmp_path), _FlakyStore(failures=2))
    d = b.delivery
    d.sleep, d.monotonic, d.now_ns, d.random = clock.sleep, clock.monotonic, clock.now_ns, lambda: 0.0
    async with b:
        first, second = await endpoints(Scripted([])), await endpoints(Scripted([]))
        await _subscribe(b, first.url)
        (second_sub,) = await b.orchestrator.register_subscriptions(
            ADMIN, [SubscriptionRegistration(namespace="t.x", endpoint=second.url)]
        )
        assert "Ok" in msgspec.structs.asdict(second_sub) and second_sub.Ok
        await _publish(b, 3)
        for ep in (first, second):
            await eventually(lambda ep=ep: sum(map(len, ep.app.pushes)) == 3)
        await _publish(b, 2)  # and it goes on with what comes next
        for ep in (first, second):
            await eventually(lambda ep=ep: sum(map(len, ep.app.pushes)) == 5)
        assert b.delivery.metrics.worker_restarts == 2
        assert [p for p in (await b.store.pending_counts()).values() if p] == []
    assert "delivery failed; restarting" in caplog.text
