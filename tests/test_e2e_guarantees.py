"""Delivery guarantees end to end (docs/delivery.md, XEP-0021 §3.1-3.6 and §4.3-4.4).

Every test runs the real server process with short retry timings and real HTTP
endpoints: ``Hook`` plays the subscribers (scripted per subscription, told apart by the
``x-tidings-subscription`` header, recording every push) and ``Approver`` plays a
publisher's authorisation endpoint.

Covered: dead letters of reliable subscriptions (listing, redrive through the SDK and
the CLI under the same notification id, drop, other principals kept out, statistics
adding up); per-subscription ``maxAttempts``/``maxAgeMs``; subscriptions that are not
reliable (an error answer ends them, ``onError = "deadletter"``, no answer is not an
error answer); ``410 Gone`` and ``Retry-After``; publisher authorisation; ``/metrics``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import msgspec
import pytest

from tidings.client import Admin, Publisher, Subscriber
from tidings.core.wire import DeadLetterInfo, EventNotification, ItemResult

from .conftest import Endpoint, ServerProcess, eventually, free_port, read_body, respond

pytestmark = pytest.mark.e2e

RELIABLE = "tidings:subscription:reliable"
ON_ERROR = "tidings:subscription:onError"
MAX_ATTEMPTS = "tidings:subscription:maxAttempts"
MAX_AGE_MS = "tidings:subscription:maxAgeMs"
AUTH_URL = "tidings:publication:authorization:url"
AUTH_TIMEOUT_MS = "tidings:publication:authorization:timeoutMs"

NOTIFICATIONS = "icrc72:subscription:stats:notifications"
RECORDED = "tidings:subscription:stats:recorded"
CONFIRMATIONS = "icrc72:subscription:stats:confirmations"
RETRIES = "tidings:subscription:stats:retries"
DEAD_LETTERS = "tidings:subscription:stats:deadLetters"
DROPPED = "tidings:subscription:stats:dropped"
ENDED = "tidings:subscriber:stats:subscriptionsEnded"
NOTES_ENDED = "tidings:subscriber:stats:notifications:ended"

MAX_ATTEMPTS_DEFAULT = 3  # the service setting of every test here


# -- endpoints -------------------------------------------------------------------------------


@dataclass
class Push:
    sub: int
    at: float
    """time.monotonic() on arrival"""
    wall_ns: int
    ids: list[int]
    """notification ids"""
    event_ids: list[int]
    namespaces: list[str]
    status: int
    """what the endpoint answered"""


class Hook:
    """Subscriber endpoints. Per subscription: ``script[sub]`` answers (status, headers)
    are used first, one per push; then ``status[sub]`` (default 200)."""

    def __init__(self) -> None:
        self.status: dict[int, int] = {}
        self.script: dict[int, deque[tuple[int, dict[str, str]]]] = defaultdict(deque)
        self.pushes: list[Push] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        sub = int(dict(scope["headers"])[b"x-tidings-subscription"])
        batch = json.loads(body)
        if self.script[sub]:
            status, headers = self.script[sub].popleft()
        else:
            status, headers = self.status.get(sub, 200), {}
        self.pushes.append(Push(
            sub, time.monotonic(), time.time_ns(), [n["id"] for n in batch], [n["eventId"] for n in batch],
            [n["namespace"] for n in batch], status,
        ))
        await respond(send, status, headers=headers.items())

    def of(self, sub: int) -> list[Push]:
        return [p for p in self.pushes if p.sub == sub]

    def delivered(self, sub: int) -> list[int]:
        """Event ids of the pushes answered 2xx, in order."""
        return [e for p in self.of(sub) if 200 <= p.status < 300 for e in p.event_ids]

    def notifications_pushed(self, sub: int | None = None) -> int:
        return sum(len(p.ids) for p in self.pushes if sub is None or p.sub == sub)


class Approver:
    """A publisher's authorisation endpoint. Answers per subscriber: ``answers[name]``
    (status, body), default 200, marked as a publisher's answer (``x-tidings-authorization:
    response``) unless the name is in ``unmarked``; ``hold[name]`` keeps the answer until
    it is set."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], Any]] = []
        self.answers: dict[str, tuple[int, bytes]] = {}
        self.hold: dict[str, asyncio.Event] = {}
        self.unmarked: set[str] = set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = json.loads(await read_body(receive))
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.requests.append((headers, body))
        who = body.get("subscriber")
        if who in self.hold:
            await self.hold[who].wait()
        status, text = self.answers.get(who, (200, b""))
        marked = [] if who in self.unmarked else [("x-tidings-authorization", "response")]
        await respond(send, status, text, marked)

    def release_all(self) -> None:
        for e in self.hold.values():
            e.set()

    def bodies(self, subscriber: str | None = None) -> list[Any]:
        return [b for _, b in self.requests if subscriber is None or b["subscriber"] == subscriber]


# -- the world of one server -----------------------------------------------------------------


async def _ignore(n: EventNotification) -> None:
    pass


class Env:
    """Principals of one server, their SDK objects and a raw API."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.tokens: dict[str, str] = {"admin": server.admin_token}
        self._clients: list[Any] = []
        self._pubs: dict[str, Publisher] = {}
        self._subs: dict[tuple[str, str], Subscriber] = {}
        self._admin: Admin | None = None
        self._http: aiohttp.ClientSession | None = None

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.server.url, self.tokens["admin"])
            self._clients.append(self._admin)
        return self._admin

    async def principals(self, *names: str) -> None:
        for name in names:
            self.tokens[name] = await self.admin.create_principal(name)

    def pub(self, name: str) -> Publisher:
        if name not in self._pubs:
            self._pubs[name] = Publisher(self.server.url, self.tokens[name])
            self._clients.append(self._pubs[name])
        return self._pubs[name]

    def sub(self, name: str, mode: Literal["trusted", "oneshot"] = "trusted") -> Subscriber:
        """The SDK's subscription calls as ``name`` (its ASGI side is not mounted)."""
        if (name, mode) not in self._subs:
            s = Subscriber(_ignore, url=self.server.url, token=self.tokens[name], mode=mode)
            self._subs[name, mode] = s
            self._clients.append(s)
        return self._subs[name, mode]

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        return self._http

    async def api(self, method: str, arg: Any, as_: str = "admin") -> Any:
        """A raw call; asserts 200 and returns the decoded JSON answer (``arg`` None: empty body)."""
        headers = {"authorization": f"Bearer {self.tokens[as_]}", "content-type": "application/json"}
        data = b"" if arg is None else json.dumps(arg)
        async with self.http.post(f"{self.server.url}/v1/{method}", data=data, headers=headers) as r:
            body = await r.json()
            assert r.status == 200, body
            return body

    async def register(self, name: str, **reg: Any) -> dict[str, Any]:
        """One raw icrc72_register_subscription item; its item result."""
        (r,) = await self.api("icrc72_register_subscription", [reg], as_=name)
        return r  # type: ignore[no-any-return]

    async def cli(self, *args: str, as_: str) -> str:
        """``tidings ARGS --url U --token T`` (off the loop: the endpoints live in it)."""
        return await asyncio.to_thread(
            self.server.cli, *args, "--url", self.server.url, "--token", self.tokens[as_]
        )

    async def close(self) -> None:
        for c in self._clients:
            await c.close()
        if self._http is not None:
            await self._http.close()

    # -- statistics and state -----------------------------------------------------------

    async def sub_stats(self, sub: int) -> dict[str, int]:
        (info,) = await self.admin.get_subscriptions(prev=sub - 1, take=1)
        assert info.id == sub
        return _nats(info.stats)

    async def subscriber_stats(self, name: str) -> dict[str, int]:
        for s in await self.admin.get_subscribers():
            if s.subscriber == name:
                return _nats(s.stats)
        return {}

    async def subscription_ids(self) -> set[int]:
        return {s.id for s in await self.admin.get_subscriptions()}

    async def metrics(self) -> tuple[dict[str, float], str]:
        async with self.http.get(f"{self.server.url}/metrics") as r:
            assert r.status == 200
            assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
            text = await r.text()
        return parse_metrics(text), text


def _nats(pairs: Any) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for k, v in pairs:
        assert list(v) == ["Nat"], (k, v)
        out[k] = v["Nat"]
    return out


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format: ``name{labels} value`` lines by ``name{labels}``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out


@pytest.fixture
async def env(server_factory: Callable[..., ServerProcess]) -> AsyncIterator[Env]:
    server = server_factory(
        retry_initial_s="0.02", retry_max_s="0.1", max_attempts=str(MAX_ATTEMPTS_DEFAULT), ack_deadline_s="30"
    )
    e = Env(server)
    yield e
    await e.close()


async def hooked(
    env: Env, endpoints: Any, ns: str, *principals: str, start: bool = True
) -> tuple[Hook, Endpoint, Publisher]:
    """A ``Hook`` endpoint (not started if ``start`` is false), the principals alice and
    ``principals``, and alice's publication ``ns``."""
    hook = Hook()
    ep = await endpoints(hook, start=start)
    await env.principals("alice", *principals)
    alice = env.pub("alice")
    await alice.register_publication(ns)
    return hook, ep, alice


async def letters(client: Subscriber, n: int, sub: int | None = None) -> list[DeadLetterInfo]:
    """Wait until exactly ``n`` dead letters are listed (of ``sub``, or all the caller's)."""

    async def check() -> list[DeadLetterInfo] | None:
        found = await client.dead_letters(sub)
        assert len(found) <= n, found
        return found if len(found) == n else None

    return await eventually(check)  # type: ignore[no-any-return]


def code(r: ItemResult | None) -> str:
    assert r is not None
    return "Ok" if r.Err is msgspec.UNSET else r.Err.code


def raw_code(r: dict[str, Any]) -> str:
    if "Ok" in r:
        return "Ok"
    (c,) = r["Err"]
    return str(c)


async def quiet(s: float = 0.3) -> None:
    """A short pause for what must not happen to have had the chance to."""
    await asyncio.sleep(s)


# -- 1. reliable: dead letters, redrive, drop --------------------------------------------------


async def test_reliable_dead_letters_redrive_and_drop(env: Env, endpoints: Any) -> None:
    ns = "com.example.dead"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob", "mallory")
    bob, mallory = env.sub("bob"), env.sub("mallory")
    sub = await bob.subscribe(ns, ep.url)

    # An endpoint answering 500: tried max_attempts times, always the same notification, then dead.
    hook.status[sub] = 500
    before = time.time_ns()
    e1 = await alice.publish(ns, 1)
    (letter,) = await letters(bob, 1)
    pushes = hook.of(sub)
    assert [p.event_ids for p in pushes] == [[e1]] * MAX_ATTEMPTS_DEFAULT
    n1 = pushes[0].ids[0]
    assert all(p.ids == [n1] for p in pushes)
    assert (letter.id, letter.subscription, letter.subscriber, letter.namespace, letter.eventId, letter.attempts) == (
        n1, sub, "bob", ns, e1, MAX_ATTEMPTS_DEFAULT
    )
    assert letter.reason == "attempts_exhausted", letter.reason
    assert before <= letter.timestamp <= time.time_ns()
    assert await bob.dead_letters(sub) == [letter]

    # Delivery moves on: the next event goes out (the dead one is not tried again).
    hook.status[sub] = 200
    e2 = await alice.publish(ns, 2)
    await eventually(lambda: hook.delivered(sub) == [e2])
    assert len(hook.of(sub)) == MAX_ATTEMPTS_DEFAULT + 1

    # Another principal sees nothing and may touch nothing.
    assert await mallory.dead_letters() == []
    assert await mallory.dead_letters(sub) == []
    assert [code(r) for r in await mallory.redrive([n1])] == ["Unauthorized"]
    assert [code(r) for r in await mallory.drop_dead_letters([n1])] == ["Unauthorized"]
    assert await bob.dead_letters() == [letter]

    # Redrive (SDK): pushed again under the same notification id, and confirmed.
    (r,) = await bob.redrive([n1])
    assert r is not None and r.Ok is True
    await eventually(lambda: hook.delivered(sub) == [e2, e1])
    assert hook.of(sub)[-1].ids == [n1]
    assert await bob.dead_letters() == []
    assert [code(r) for r in await bob.redrive([n1])] == ["NotFound"]  # no longer a dead letter

    # Redrive (CLI); a redriven notification goes before new events.
    hook.status[sub] = 500
    e3 = await alice.publish(ns, 3)
    (letter3,) = await letters(bob, 1)
    assert letter3.eventId == e3 and letter3.attempts == MAX_ATTEMPTS_DEFAULT
    hook.status[sub] = 200
    listed = await env.cli("dead-letters", "list", as_="bob")
    assert f"{ns}/{e3}" in listed and str(letter3.id) in listed and "1 dead letter(s)" in listed
    assert "0 dead letter(s)" in await env.cli("dead-letters", "list", as_="mallory")
    assert await env.cli("dead-letters", "redrive", str(letter3.id), as_="bob") == f"{letter3.id}: ok"
    e4 = await alice.publish(ns, 4)
    await eventually(lambda: hook.delivered(sub) == [e2, e1, e3, e4])
    assert [p.ids for p in hook.of(sub)[-2:]] == [[letter3.id], hook.of(sub)[-1].ids]
    assert await bob.dead_letters() == []

    # Drop (SDK and CLI): gone for good, not sent again.
    hook.status[sub] = 500
    e5, e6 = await alice.publish_many(ns, [5, 6])
    found = await letters(bob, 2)
    assert [d.eventId for d in found] == [e5, e6]
    d5, d6 = (d.id for d in found)
    assert [code(r) for r in await mallory.drop_dead_letters([d5, d6])] == ["Unauthorized"] * 2
    assert [code(r) for r in await bob.drop_dead_letters([d5])] == ["Ok"]
    assert await env.cli("dead-letters", "drop", str(d6), as_="bob") == f"{d6}: ok"
    assert await bob.dead_letters() == []
    assert [code(r) for r in await bob.redrive([d5, d6])] == ["NotFound"] * 2
    pushed = len(hook.pushes)
    await quiet()
    assert len(hook.pushes) == pushed

    # The statistics add up: every notification ended confirmed or dropped (after dead-lettering).
    failed_tries = sum(len(p.ids) for p in hook.of(sub) if p.status == 500)
    assert failed_tries == 3 * MAX_ATTEMPTS_DEFAULT + 1 * MAX_ATTEMPTS_DEFAULT  # e1, e3, then e5 and e6 together
    # Sent: only what an endpoint took (e5 and e6 never were); a retry is a failed try that
    # was tried again (the last one of each given up on was not).
    want = {RECORDED: 6, NOTIFICATIONS: 4, CONFIRMATIONS: 4, DEAD_LETTERS: 4, DROPPED: 2, RETRIES: failed_tries - 4}
    stats = await env.sub_stats(sub)
    assert {k: stats[k] for k in want} == want
    redriven = 2
    assert stats[CONFIRMATIONS] + stats[DROPPED] == stats[RECORDED]
    assert stats[DEAD_LETTERS] == redriven + stats[DROPPED]
    by_subscriber = await env.subscriber_stats("bob")
    assert {k: by_subscriber[k.replace(":subscription:", ":subscriber:")] for k in want} == want
    assert by_subscriber[ENDED] == 0
    # Nothing is left pending.
    m, _ = await env.metrics()
    assert m.get(f'tidings_notifications_pending{{subscription="{sub}"}}', 0) == 0


# -- 2. per-subscription limits --------------------------------------------------------------


async def test_per_subscription_max_attempts_and_max_age(env: Env, endpoints: Any) -> None:
    ns = "com.example.limits"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob")
    bob = env.sub("bob")
    two = await bob.subscribe(ns, ep.url, config={MAX_ATTEMPTS: 2})
    default = await bob.subscribe(ns, ep.url)
    aged = await bob.subscribe(ns, ep.url, config={MAX_AGE_MS: 300, MAX_ATTEMPTS: 1000})
    for s in (two, default, aged):
        hook.status[s] = 500

    e1 = await alice.publish(ns, 1)
    by_sub = {d.subscription: d for d in await letters(bob, 3)}
    # maxAttempts overrides the service's setting: exactly that many pushes.
    assert len(hook.of(two)) == 2 and by_sub[two].attempts == 2
    assert len(hook.of(default)) == MAX_ATTEMPTS_DEFAULT and by_sub[default].attempts == MAX_ATTEMPTS_DEFAULT
    # maxAgeMs: given up by age, long before 1000 attempts.
    old = by_sub[aged]
    tries = hook.of(aged)
    assert old.eventId == e1 and 3 <= old.attempts == len(tries) < 100
    assert old.timestamp - tries[0].wall_ns >= 250_000_000  # 300 ms after it was recorded, less slack
    assert tries[-1].at - tries[0].at < 1.0
    pushed = len(hook.pushes)
    await quiet()
    assert len(hook.pushes) == pushed  # nothing is tried after it is dead

    # Invalid values are refused at registration and at update, naming the key.
    bad = [(MAX_ATTEMPTS, {"Nat": 0}), (MAX_ATTEMPTS, {"Text": "2"}), (MAX_AGE_MS, {"Nat": 0}),
           (MAX_AGE_MS, {"Text": "300"}), (ON_ERROR, {"Text": "ignore"}), (RELIABLE, {"Nat": 1})]
    results = await env.api("icrc72_register_subscription", [
        {"namespace": ns, "endpoint": ep.url, "config": [[k, v]]} for k, v in bad
    ], as_="bob")
    assert [raw_code(r) for r in results] == ["ImproperConfig"] * len(bad)
    for r, (k, _) in zip(results, bad, strict=True):
        assert k in r["Err"]["ImproperConfig"]
    results = await env.api("icrc72_update_subscription", [{"id": two, "config": [[k, v]]} for k, v in bad], as_="bob")
    assert [raw_code(r) for r in results] == ["ImproperConfig"] * len(bad)
    assert await env.subscription_ids() == {two, default, aged}
    (info,) = await env.admin.get_subscriptions(prev=two - 1, take=1)
    assert dict(info.config)[MAX_ATTEMPTS] == {"Nat": 2}  # refused updates changed nothing

    # A valid update applies to the next events.
    await bob.update(two, {MAX_ATTEMPTS: 1})
    e2 = await alice.publish(ns, 2)

    async def two_gave_up() -> bool:
        return any(d.eventId == e2 for d in await bob.dead_letters(two))

    await eventually(two_gave_up)
    (d2,) = [d for d in await bob.dead_letters(two) if d.eventId == e2]
    assert d2.attempts == 1
    assert [p.event_ids for p in hook.of(two)].count([e2]) == 1


# -- 3. not reliable (XEP-0021 §3.5) ---------------------------------------------------------


async def test_not_reliable_error_answer_ends_the_subscription(env: Env, endpoints: Any) -> None:
    ns = "com.example.unreliable"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob")
    bob = env.sub("bob")
    r = await env.register("bob", namespace=ns, endpoint=ep.url, reliable=False)
    sub = r["Ok"]
    keep = await bob.subscribe(ns, ep.url)  # reliable, answered 200: unaffected
    (info,) = await env.admin.get_subscriptions(prev=sub - 1, take=1)
    assert dict(info.config)[RELIABLE] == {"Bool": False}

    hook.status[sub] = 500
    e1 = await alice.publish(ns, 1)
    await eventually(lambda: hook.delivered(keep) == [e1])

    async def ended() -> bool:
        return sub not in await env.subscription_ids()

    await eventually(ended)
    assert len(hook.of(sub)) == 1  # not tried again
    stats = await env.subscriber_stats("bob")
    assert stats[ENDED] == 1 and stats[NOTES_ENDED] == 1
    # What it still owed outlives it as a dead letter naming the cause, for bob to drop.
    (letter,) = await bob.dead_letters()
    assert (letter.subscription, letter.eventId, letter.reason, letter.attempts) == (sub, e1, "subscription_ended", 1)
    assert await bob.dead_letters(sub) == [letter]
    assert [code(r) for r in await bob.redrive([letter.id])] == ["NotFound"]  # nowhere to send it
    assert [code(r) for r in await bob.drop_dead_letters([letter.id])] == ["Ok"]
    assert await bob.dead_letters() == []

    e2 = await alice.publish(ns, 2)
    await eventually(lambda: hook.delivered(keep) == [e1, e2])
    await quiet()
    assert len(hook.of(sub)) == 1  # later events are not pushed
    assert await env.subscription_ids() == {keep}


async def test_not_reliable_on_error_deadletter(env: Env, endpoints: Any) -> None:
    ns = "com.example.unreliable.dl"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob")
    bob = env.sub("bob")
    r = await env.register(
        "bob", namespace=ns, endpoint=ep.url, reliable=False, config=[[ON_ERROR, {"Text": "deadletter"}]]
    )
    sub = r["Ok"]

    hook.status[sub] = 500
    e1 = await alice.publish(ns, 1)
    (letter,) = await letters(bob, 1)
    assert (letter.eventId, letter.attempts, letter.subscription) == (e1, 1, sub)
    assert letter.reason == "error_answer"
    assert len(hook.of(sub)) == 1  # one push, no retry

    hook.status[sub] = 200
    e2 = await alice.publish(ns, 2)
    await eventually(lambda: hook.delivered(sub) == [e2])  # delivery goes on
    assert sub in await env.subscription_ids()
    assert (await env.subscriber_stats("bob"))[ENDED] == 0

    async def confirmed() -> bool:  # committed just after the endpoint answers
        return (await env.sub_stats(sub))[CONFIRMATIONS] == 1

    await eventually(confirmed, timeout=5)
    stats = await env.sub_stats(sub)
    # The dead-lettered one was never taken by the endpoint: recorded, not sent.
    assert (stats[RECORDED], stats[NOTIFICATIONS], stats[CONFIRMATIONS], stats[DEAD_LETTERS]) == (2, 1, 1, 1)


async def test_not_reliable_no_answer_is_retried_not_ended(env: Env, endpoints: Any) -> None:
    ns = "com.example.unreliable.down"
    hook, down, alice = await hooked(env, endpoints, ns, "bob", start=False)  # connection refused until started
    r = await env.register(
        "bob", namespace=ns, endpoint=down.url, reliable=False, config=[[MAX_ATTEMPTS, {"Nat": 1000}]]
    )
    sub = r["Ok"]

    e1 = await alice.publish(ns, 1)

    async def failing() -> bool:
        return (await env.sub_stats(sub))[RETRIES] >= 3

    await eventually(failing)
    assert sub in await env.subscription_ids()
    await down.start()
    await eventually(lambda: hook.delivered(sub) == [e1])
    e2 = await alice.publish(ns, 2)
    await eventually(lambda: hook.delivered(sub) == [e1, e2])
    assert sub in await env.subscription_ids()
    assert (await env.subscriber_stats("bob"))[ENDED] == 0
    assert await env.sub("bob").dead_letters() == []


# -- 4. 410 Gone and Retry-After -----------------------------------------------------------


async def test_gone_ends_a_reliable_subscription(env: Env, endpoints: Any) -> None:
    ns = "com.example.gone"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob")
    bob = env.sub("bob")
    sub = await bob.subscribe(ns, ep.url)  # reliable by default
    # bob keeps one subscription: icrc72_get_subscribers lists only principals that have one,
    # so without it his subscriber statistics could not be read.
    keep = await bob.subscribe(ns, ep.url)
    hook.status[sub] = 410
    e1 = await alice.publish(ns, 1)

    async def ended() -> bool:
        return sub not in await env.subscription_ids()

    await eventually(ended)
    assert len(hook.of(sub)) == 1
    stats = await env.subscriber_stats("bob")
    assert stats[ENDED] == 1 and stats[NOTES_ENDED] == 1
    (letter,) = await bob.dead_letters()
    assert (letter.subscription, letter.eventId, letter.reason, letter.attempts) == (sub, e1, "endpoint_gone", 1)
    await env.principals("mallory")
    assert await env.sub("mallory").dead_letters(sub) == []  # only its subscriber sees them
    assert [code(r) for r in await env.sub("mallory").drop_dead_letters([letter.id])] == ["NotFound"]
    m, _ = await env.metrics()
    assert m["tidings_subscriptions_ended_total"] == 1
    e2 = await alice.publish(ns, 2)
    await eventually(lambda: hook.delivered(keep) == [e1, e2])
    await quiet()
    assert len(hook.of(sub)) == 1


async def test_retry_after_is_honoured(env: Env, endpoints: Any) -> None:
    ns = "com.example.later"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob")
    bob = env.sub("bob")
    s429 = await bob.subscribe(ns, ep.url)
    s503 = await bob.subscribe(ns, ep.url)
    s500 = await bob.subscribe(ns, ep.url)
    hook.script[s429].append((429, {"Retry-After": "2"}))
    hook.script[s503].append((503, {"Retry-After": "2"}))
    hook.script[s500].append((500, {"Retry-After": "2"}))  # not 429/503: the header means nothing

    e1 = await alice.publish(ns, 1)
    for s in (s429, s503, s500):
        await eventually(lambda s=s: hook.delivered(s) == [e1], timeout=5)
    gaps = {}
    for s in (s429, s503, s500):
        first, second = hook.of(s)
        assert first.ids == second.ids
        gaps[s] = second.at - first.at
    # retry_max_s is 0.1: only Retry-After can make the wait this long.
    assert 1.8 <= gaps[s429] < 5.0, gaps
    assert 1.8 <= gaps[s503] < 5.0, gaps
    assert gaps[s500] < 1.2, gaps  # retry_max_s, with room for a loaded machine
    for s in (s429, s503):
        # The confirmation is committed just after the endpoint answers: wait for it.
        async def settled(s: int = s) -> bool:
            return (await env.sub_stats(s))[CONFIRMATIONS] == 1

        await eventually(settled, timeout=5)
        stats = await env.sub_stats(s)
        # Back-pressure is not a failed try (docs/delivery.md): no retry counted.
        assert (stats[RETRIES], stats[CONFIRMATIONS], stats[DEAD_LETTERS]) == (0, 1, 0)


# -- 5. publisher authorisation (XEP-0021 §4.3-4.4) -------------------------------------------


async def test_a_new_endpoint_or_auth_info_is_approved_again(env: Env, endpoints: Any) -> None:
    approver = Approver()
    ep, ep2, auth = await endpoints(Hook()), await endpoints(Hook()), await endpoints(approver)
    ns = "com.x.reauth"
    await env.principals("alice", "bob")
    await env.pub("alice").register_publication(ns, {AUTH_URL: auth.url})
    r = await env.register("bob", namespace=ns, endpoint=ep.url, authInfo="v1")
    sub = r["Ok"]

    async def endpoint_now() -> str:
        (info,) = [s for s in await env.admin.get_subscriptions() if s.id == sub]
        return str(info.endpoint)

    approver.answers["bob"] = (403, b"not there")
    for change in ({"endpoint": ep2.url}, {"authInfo": "v2"}, {"endpoint": ep2.url, "authInfo": "v2"}):
        (res,) = await env.api("icrc72_update_subscription", [{"id": sub, **change}], as_="bob")
        assert res["Err"]["GenericError"]["error_code"] == 403, (change, res)
        assert await endpoint_now() == ep.url  # refused: nothing changed
    asked = len(approver.requests)
    # A change of config alone is not a new request.
    (res,) = await env.api("icrc72_update_subscription", [{"id": sub, "config": [
        ["icrc72:subscription:stopped", {"Bool": False}]]}], as_="bob")
    assert "Ok" in res and len(approver.requests) == asked
    approver.answers.pop("bob")
    (res,) = await env.api("icrc72_update_subscription", [{"id": sub, "endpoint": ep2.url, "authInfo": "v3"}],
                           as_="bob")
    assert "Ok" in res
    assert approver.bodies("bob")[-1] == {"namespace": ns, "subscriber": "bob", "authInfo": "v3", "endpoint": ep2.url}
    assert await endpoint_now() == ep2.url


async def test_publisher_authorisation(env: Env, endpoints: Any) -> None:
    hook, approver = Hook(), Approver()
    ep, auth = await endpoints(hook), await endpoints(approver)
    ns, held, nowhere, open_ns = "com.x.auth", "com.x.held", "com.x.nowhere", "com.x.open"
    await env.principals("alice", "bob", "dan", "erin", "frank", "gina", "mallory")
    alice = env.pub("alice")
    await alice.register_publication(ns, {AUTH_URL: auth.url, AUTH_TIMEOUT_MS: 300})
    await alice.register_publication(held, {AUTH_URL: auth.url})
    await alice.register_publication(nowhere, {AUTH_URL: f"http://127.0.0.1:{free_port()}/", AUTH_TIMEOUT_MS: 300})
    await alice.register_publication(open_ns)
    approver.answers.update(dan=(401, b"no way"), erin=(403, b""))
    approver.hold.update(frank=asyncio.Event(), gina=asyncio.Event())
    try:
        # Approved: Ok; the publisher got the request with the authInfo untouched.
        auth_info = {"password": "s3cret", "scopes": ["read", "write"], "n": 1.5, "deep": {"ok": True, "none": None}}
        r = await env.register("bob", namespace=ns, endpoint=ep.url, authInfo=auth_info)
        assert raw_code(r) == "Ok", r
        sub = r["Ok"]
        ((headers, body),) = approver.requests
        assert body == {"namespace": ns, "subscriber": "bob", "authInfo": auth_info, "endpoint": ep.url}
        assert headers["content-type"] == "application/json"

        # Denied with a body: that status and body, untouched.
        r = await env.register("dan", namespace=ns, endpoint=ep.url, authInfo="hunter2")
        assert r == {"Err": {"GenericError": {"error_code": 401, "message": "no way"}}}
        assert approver.bodies("dan")[0]["authInfo"] == "hunter2"
        # Denied with a body the publisher did not mark as its answer (any other server's
        # page): never passed on (docs/security.md), 503 as without a reason.
        approver.answers["mallory"] = (404, b"<html>internal admin console</html>")
        approver.unmarked.add("mallory")
        r = await env.register("mallory", namespace=ns, endpoint=ep.url)
        assert r["Err"]["GenericError"]["error_code"] == 503, r
        assert "internal" not in json.dumps(r)
        # Denied without a body: 503.
        r = await env.register("erin", namespace=ns, endpoint=ep.url)
        assert r["Err"]["GenericError"]["error_code"] == 503, r
        assert approver.bodies("erin")[0]["authInfo"] is None
        # No answer in time: 504, after about timeoutMs.
        start = time.monotonic()
        r = await env.register("frank", namespace=ns, endpoint=ep.url)
        took = time.monotonic() - start
        assert r["Err"]["GenericError"]["error_code"] == 504, r
        assert 0.25 <= took < 2.0, took
        # No connection: 504 as well.
        r = await env.register("bob", namespace=nowhere, endpoint=ep.url)
        assert r["Err"]["GenericError"]["error_code"] == 504, r
        subs = await env.admin.get_subscriptions()
        assert [(s.id, s.subscriber, s.namespace) for s in subs] == [(sub, "bob", ns)]

        # A request being held is listed to its subscriber and the publication's controller.
        waiting = asyncio.create_task(env.register("gina", namespace=held, endpoint=ep.url))
        await eventually(lambda: approver.bodies("gina"))
        pending = await env.api("tidings_get_pending_authorizations", None, as_="gina")
        assert [(p["namespace"], p["subscriber"]) for p in pending] == [(held, "gina")]
        assert await env.api("tidings_get_pending_authorizations", None, as_="alice") == pending
        assert await env.api("tidings_get_pending_authorizations", None, as_="mallory") == []
        assert not waiting.done()
        approver.hold["gina"].set()
        r = await waiting
        assert raw_code(r) == "Ok", r
        gina_sub = r["Ok"]
        assert await env.api("tidings_get_pending_authorizations", None, as_="gina") == []
        assert await env.api("tidings_get_pending_authorizations", None, as_="admin") == []

        # A pattern subscription is not asked about and does not cover the namespaces that
        # require approval; subscriptions by name get their events.
        asked = len(approver.requests)
        pattern = await env.sub("bob").subscribe("com.x.*", ep.url)
        assert len(approver.requests) == asked
        e_auth = await alice.publish(ns, 1)
        e_held = await alice.publish(held, 2)
        e_open = await alice.publish(open_ns, 3)
        await eventually(lambda: hook.delivered(pattern) == [e_open])
        await eventually(lambda: hook.delivered(sub) == [e_auth])
        await eventually(lambda: hook.delivered(gina_sub) == [e_held])
        assert [p.namespaces for p in hook.of(pattern)] == [[open_ns]]
    finally:
        approver.release_all()


# -- 6. /metrics -------------------------------------------------------------------------------


async def test_metrics(env: Env, endpoints: Any) -> None:
    hook = Hook()
    ep = await endpoints(hook)
    ns = "com.example.metrics"
    await env.principals("alice", "bob")
    alice, bob, bob1 = env.pub("alice"), env.sub("bob"), env.sub("bob", "oneshot")

    m, text = await env.metrics()  # no token needed
    for name, kind in [
        ("tidings_events_published_total", "counter"), ("tidings_notifications_sent_total", "counter"),
        ("tidings_notifications_confirmed_total", "counter"), ("tidings_notifications_retried_total", "counter"),
        ("tidings_notifications_dead_lettered_total", "counter"), ("tidings_subscriptions_ended_total", "counter"),
        ("tidings_notifications_pending", "gauge"), ("tidings_delivery_latency_seconds", "histogram"),
    ]:
        assert f"# TYPE {name} {kind}\n" in text
        if kind == "counter":
            assert m[name] == 0, name
    assert m["tidings_delivery_latency_seconds_count"] == 0
    assert m['tidings_delivery_latency_seconds_bucket{le="+Inf"}'] == 0

    await alice.register_publication(ns)
    ok = await bob.subscribe(ns, ep.url)
    failing = await bob.subscribe(ns, ep.url, config={MAX_ATTEMPTS: 2})
    oneshot = await bob1.subscribe(ns, ep.url)
    gone = await bob.subscribe(ns, ep.url)
    hook.status.update({failing: 500, gone: 410})
    events = await alice.publish_many(ns, [1, 2, 3])
    last: dict[str, Any] = {}

    def pending(m: dict[str, float], sub: int) -> float:
        return m.get(f'tidings_notifications_pending{{subscription="{sub}"}}', 0)

    async def reached(want: dict[str, float], pending_want: dict[int, float]) -> bool:
        m, _ = await env.metrics()
        last["m"] = m
        return all(m.get(k) == v for k, v in want.items()) and all(
            pending(m, s) == v for s, v in pending_want.items()
        )

    await eventually(lambda: hook.delivered(ok) == events and hook.delivered(oneshot) == events)
    await letters(bob, 6)  # the failing subscription's, and those the 410 left (endpoint_gone)
    await eventually(lambda: hook.of(gone))
    # Sent: what the endpoints took (2xx); error answers and 410 are not sends.
    sent = sum(len(p.ids) for p in hook.pushes if 200 <= p.status < 300)
    want = {
        "tidings_events_published_total": 3,
        "tidings_notifications_sent_total": sent,
        "tidings_notifications_confirmed_total": 3,  # the trusted subscription's
        "tidings_notifications_retried_total": hook.notifications_pushed(failing) - 3,
        "tidings_notifications_dead_lettered_total": 6,
        "tidings_subscriptions_ended_total": 1,
        "tidings_delivery_latency_seconds_count": 3,
    }
    try:
        await eventually(lambda: reached(want, {oneshot: 3, ok: 0, failing: 0}), timeout=5)
    except AssertionError:
        raise AssertionError(f"metrics {last.get('m')} do not reach {want}") from None
    assert hook.notifications_pushed(failing) == 3 * 2 and hook.notifications_pushed(gone) == 3

    # Confirming the oneshot notifications clears their pending gauge.
    ids = [i for p in hook.of(oneshot) for i in p.ids]
    assert (await bob1.confirm(ids)).allAccepted is None
    await eventually(lambda: reached({}, {oneshot: 0}), timeout=5)
    m = last["m"]
    buckets = [(k, v) for k, v in m.items() if k.startswith("tidings_delivery_latency_seconds_bucket")]
    count = m["tidings_delivery_latency_seconds_count"]
    # The oneshot confirmations count too: 3 trusted + 3 oneshot.
    assert count == 6 and m["tidings_notifications_confirmed_total"] == 6
    assert buckets[-1] == ('tidings_delivery_latency_seconds_bucket{le="+Inf"}', count)
    counts = [v for _, v in buckets]
    assert counts == sorted(counts)
    assert 0 < m["tidings_delivery_latency_seconds_sum"] < count * 30


async def test_metrics_count_oneshot_confirmations(env: Env, endpoints: Any) -> None:
    ns = "com.example.metrics.oneshot"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob")
    bob = env.sub("bob", "oneshot")
    sub = await bob.subscribe(ns, ep.url)
    events = await alice.publish_many(ns, [1, 2])
    await eventually(lambda: hook.delivered(sub) == events)
    assert (await bob.confirm([i for p in hook.of(sub) for i in p.ids])).allAccepted is None
    assert (await env.sub_stats(sub))[CONFIRMATIONS] == 2
    m, _ = await env.metrics()
    assert m.get(f'tidings_notifications_pending{{subscription="{sub}"}}', 0) == 0
    assert m["tidings_notifications_confirmed_total"] == 2
    assert m["tidings_delivery_latency_seconds_count"] == 2
