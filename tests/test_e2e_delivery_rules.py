"""Delivery rules end to end (docs/delivery.md): back-pressure, per-subscription timings on
every path, stopped subscriptions, order of re-pushes.

The real server process, real endpoints on 127.0.0.1. Timings are short per subscription
and every check waits for its condition with a generous deadline, so a loaded machine
makes the tests slower, not red.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from .conftest import ServerProcess, eventually, read_body, respond
from .test_e2e_guarantees import (
    CONFIRMATIONS,
    DEAD_LETTERS,
    MAX_AGE_MS,
    MAX_ATTEMPTS,
    NOTIFICATIONS,
    RECORDED,
    RETRIES,
    Env,
    Hook,
    Push,
    hooked,
    letters,
    quiet,
)

pytestmark = pytest.mark.e2e

ACK_DEADLINE_MS = "tidings:subscription:ackDeadlineMs"


class HoldingHook(Hook):
    """A ``Hook`` that can hold its answer to the next ``hold[sub]`` pushes of a subscription
    for ``hold_s`` seconds (past the push deadline: the push gets no answer in time)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: dict[int, int] = {}
        self.hold_s = 0.0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = json.loads(await read_body(receive))
        sub = int(dict(scope["headers"])[b"x-tidings-subscription"])
        held = self.hold.get(sub, 0) > 0
        self.pushes.append(Push(
            sub, time.monotonic(), time.time_ns(), [n["id"] for n in body], [n["eventId"] for n in body],
            [n["namespace"] for n in body], 0 if held else 200,
        ))
        if held:
            self.hold[sub] -= 1
            await asyncio.sleep(self.hold_s)
        await respond(send, 200)


@pytest.fixture
async def env(server_factory: Callable[..., ServerProcess]) -> AsyncIterator[Env]:
    # Long service defaults, so that only a subscription's own timings can explain what happens.
    server = server_factory(retry_initial_s="0.02", retry_max_s="0.1", max_attempts="3", ack_deadline_s="30")
    e = Env(server)
    yield e
    await e.close()


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- 1. back-pressure -------------------------------------------------------------------------


async def test_back_pressure_delays_and_never_ends_or_counts(env: Env, endpoints: Any) -> None:
    ns = "com.example.pressure"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob")
    bob = env.sub("bob")
    unreliable = (await env.register(
        "bob", namespace=ns, endpoint=ep.url, reliable=False, config=[[MAX_ATTEMPTS, {"Nat": 1}]]
    ))["Ok"]
    reliable = await bob.subscribe(ns, ep.url, config={MAX_ATTEMPTS: 1})
    for s in (unreliable, reliable):
        hook.script[s].append((429, {"Retry-After": "1"}))
        # An HTTP date, about a second ahead when it is read.
        hook.script[s].append((503, {"Retry-After": email.utils.formatdate(time.time() + 2.5, usegmt=True)}))

    e1 = await alice.publish(ns, 1)
    for s in (unreliable, reliable):
        await eventually(lambda s=s: hook.delivered(s) == [e1], timeout=20)

        async def confirmed(s: int = s) -> bool:
            return (await env.sub_stats(s))[CONFIRMATIONS] == 1

        await eventually(confirmed)
        first, second, third = hook.of(s)
        assert first.ids == second.ids == third.ids
        assert second.at - first.at >= 0.8  # waited what it was asked to
        stats = await env.sub_stats(s)
        # Not a failed try: no retry counted, no attempt used up (maxAttempts is 1).
        assert (stats[RETRIES], stats[DEAD_LETTERS]) == (0, 0)
    assert await env.subscription_ids() == {unreliable, reliable}
    assert await bob.dead_letters() == []
    m, _ = await env.metrics()
    assert m["tidings_notifications_deferred_total"] == 4


# -- 2. per-subscription timings on every path --------------------------------------------------


async def test_own_ack_deadline_governs_oneshot_redelivery(env: Env, endpoints: Any) -> None:
    """Shorter than the service's 30 s: re-pushed after the subscription's own deadline;
    its own maximum age dead-letters it. Longer: not re-pushed early, and the worker
    waits for it quietly (no busy loop)."""
    ns = "com.example.deadline"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob")
    bob1 = env.sub("bob", "oneshot")
    short = await bob1.subscribe(ns, ep.url, config={ACK_DEADLINE_MS: 300, MAX_AGE_MS: 2500, MAX_ATTEMPTS: 1000})
    e1 = await alice.publish(ns, 1)
    await eventually(lambda: len(hook.of(short)) >= 3, timeout=20)  # never confirmed: pushed again
    assert {tuple(p.event_ids) for p in hook.of(short)} == {(e1,)}
    (letter,) = await letters(bob1, 1, short)
    assert (letter.eventId, letter.reason) == (e1, "max_age")

    await env.api("icrc72_delete_subscription", [short], as_="bob")
    server = env.server  # again, with a short default deadline
    server.env["TIDINGS_ACK_DEADLINE_S"] = "0.2"
    await asyncio.to_thread(server.restart)
    again = Env(server)  # new connections: the old ones went with the old process
    again.tokens = dict(env.tokens)
    try:
        long = await again.sub("bob", "oneshot").subscribe(ns, ep.url, config={ACK_DEADLINE_MS: 4000})
        before = len(hook.of(long))
        e2 = await again.pub("alice").publish(ns, 2)
    finally:
        await again.close()
    await eventually(lambda: len(hook.of(long)) == before + 1)
    assert server.proc is not None
    cpu = cpu_seconds(server.proc.pid)
    await asyncio.sleep(2.0)
    assert len(hook.of(long)) == before + 1  # not at the service's 0.2 s
    assert cpu_seconds(server.proc.pid) - cpu < 0.5  # and not spinning while it waits
    await eventually(lambda: len(hook.of(long)) >= before + 2, timeout=20)
    assert hook.of(long)[-1].event_ids == [e2]


# -- 3. stopped subscriptions -------------------------------------------------------------------


async def test_a_stopped_subscription_receives_nothing_retries_included(env: Env, endpoints: Any) -> None:
    ns = "com.example.stopped"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob")
    bob, bob1 = env.sub("bob"), env.sub("bob", "oneshot")
    failing = await bob.subscribe(ns, ep.url, config={MAX_ATTEMPTS: 100_000})
    waiting = await bob1.subscribe(ns, ep.url, config={ACK_DEADLINE_MS: 300, MAX_ATTEMPTS: 100_000})
    hook.status[failing] = 500
    events = [await alice.publish(ns, i) for i in range(3)]
    await eventually(lambda: len(hook.of(failing)) >= 3 and len(hook.of(waiting)) >= 2, timeout=20)
    for s in (failing, waiting):
        await bob.stop(s)
    await quiet(1.0)  # a push already on its way may still land
    counts = {s: len(hook.of(s)) for s in (failing, waiting)}
    during = await alice.publish(ns, 5)  # published while stopped: never delivered
    await asyncio.sleep(2.0)  # retries every 0.1 s, ack deadline 0.3 s: many chances
    assert {s: len(hook.of(s)) for s in (failing, waiting)} == counts

    # Started again: what was pending is pushed, in order, before anything new.
    hook.status[failing] = 200
    for s in (failing, waiting):
        await bob.start(s)
    for s in (failing, waiting):
        def resumed(s: int = s) -> list[int]:
            return [e for p in hook.of(s)[counts[s]:] for e in p.event_ids]

        await eventually(lambda s=s: len(resumed(s)) >= len(events), timeout=20)
        assert resumed(s)[: len(events)] == events, (s, resumed(s))
    later = await alice.publish(ns, 9)
    await eventually(lambda: hook.delivered(failing)[-1:] == [later], timeout=20)
    # Everything owed from before the stop (read or not yet), then what came after the start.
    assert hook.delivered(failing) == [*events, later]
    assert during not in {e for p in hook.of(waiting) for e in p.event_ids}
    ids = [i for p in hook.of(waiting) for i in p.ids]
    await bob1.confirm(sorted(set(ids)))


# -- 4. order of re-pushes ----------------------------------------------------------------------


async def test_re_pushes_keep_event_order(env: Env, endpoints: Any) -> None:
    """A oneshot subscription whose notifications come due while its worker is held up by
    another push: what is re-pushed goes out in event order, the earliest first, with
    every unconfirmed notification after it."""
    ns = "com.example.order"
    hook = HoldingHook()
    ep = await endpoints(hook)
    await env.principals("alice", "bob")
    alice = env.pub("alice")
    await alice.register_publication(ns)
    bob1 = env.sub("bob", "oneshot")
    deadline_s = 2.0
    sub = await bob1.subscribe(ns, ep.url, config={ACK_DEADLINE_MS: int(deadline_s * 1000), MAX_ATTEMPTS: 1000})

    e1 = await alice.publish(ns, 1)
    await eventually(lambda: len(hook.of(sub)) == 1, timeout=20)
    e2 = await alice.publish(ns, 2)  # pushed after e1 and before e1 is due
    await eventually(lambda: len(hook.of(sub)) == 2, timeout=20)
    await eventually(lambda: any(e1 in p.event_ids for p in hook.of(sub)[2:]), timeout=20)  # e1 came due
    # The next push is held past its deadline twice: meanwhile e1 and e2 both come due.
    hook.hold_s, hook.hold[sub] = deadline_s + 0.5, 2
    e3 = await alice.publish(ns, 3)
    await eventually(lambda: sum(e3 in p.event_ids for p in hook.of(sub)) >= 2, timeout=30)
    await eventually(lambda: len(hook.of(sub)) >= 6, timeout=30)

    seen: list[int] = []
    for p in hook.of(sub):
        assert p.event_ids == sorted(p.event_ids), [q.event_ids for q in hook.of(sub)]
        again = [e for e in p.event_ids if e in seen]
        if again:
            # A re-push carries every notification after its first one that was pushed.
            assert p.event_ids[: len(set(seen) & set(range(again[0], max(seen) + 1)))] == sorted(
                {e for e in seen if e >= again[0]}
            ), [q.event_ids for q in hook.of(sub)]
        seen.extend(p.event_ids)
    assert {e1, e2, e3} <= set(seen)
    await bob1.confirm(sorted({i for p in hook.of(sub) for i in p.ids}))


# -- 7. namespace patterns and list refusals ---------------------------------------------------


async def test_catch_all_patterns_need_an_admin_and_list_refusals_name_their_list(env: Env, endpoints: Any) -> None:
    _, ep, _ = await hooked(env, endpoints, "com.example.lists", "bob", "carol", "dave")
    for p in ("*", "**", "*.*", "*.**"):
        r = await env.register("bob", namespace=p, endpoint=ep.url)
        assert "Unauthorized" in r["Err"] and "only an admin" in r["Err"]["Unauthorized"], (p, r)
        assert "Ok" in await env.register("admin", namespace=p, endpoint=ep.url), p
    for p in ("com.*", "*.example.**", "com.example.**"):
        assert "Ok" in await env.register("bob", namespace=p, endpoint=ep.url), p
    for p in ("com.example\n", "com.**.x", "com.ex*", "com..example", " com", "com.éx"):
        r = await env.register("bob", namespace=p, endpoint=ep.url)
        assert "ImproperConfig" in r["Err"], (p, r)

    lists = {
        "icrc72:publication:subscribers:allowed:list": ["carol"],
        "icrc72:publication:subscribers:disallowed:list": ["carol"],
        "icrc72:publication:publishers:allowed:list": ["alice", "dave"],
        "icrc72:publication:publishers:disallowed:list": ["dave"],
    }
    config = [[k, {"Array": [{"Text": v} for v in vs]}] for k, vs in lists.items()]
    await env.api("icrc72_update_publication", [{"namespace": "com.example.lists", "config": config}], as_="alice")
    refusals = {
        "bob": "icrc72:publication:subscribers:allowed:list",  # not on it
        "carol": "icrc72:publication:subscribers:disallowed:list",  # on both: the denied list wins
    }
    for who, key in refusals.items():
        r = await env.register(who, namespace="com.example.lists", endpoint=ep.url)
        assert key in r["Err"]["Unauthorized"], r
    for who, key in {"bob": "icrc72:publication:publishers:allowed:list",
                     "dave": "icrc72:publication:publishers:disallowed:list"}.items():
        (r,) = await env.api("icrc72_register_publication", [{"namespace": "com.example.lists"}], as_=who)
        assert key in r["Err"]["Unauthorized"], r
        (r,) = await env.api("icrc72_publish", [{"namespace": "com.example.lists", "data": {"Nat": 1}}], as_=who)
        assert key in r["Err"]["Unauthorized"], r


# -- 5. confirming is the subscriber's own ----------------------------------------------------


async def test_confirming_another_principals_notification_is_refused_item_by_item(
    env: Env, endpoints: Any
) -> None:
    ns = "com.example.confirm"
    hook, ep, alice = await hooked(env, endpoints, ns, "bob", "carol")
    bob1, carol1 = env.sub("bob", "oneshot"), env.sub("carol", "oneshot")
    bobs = await bob1.subscribe(ns, ep.url)
    trusted = await env.sub("bob").subscribe(ns, ep.url)
    carols = await carol1.subscribe(ns, ep.url)
    await alice.publish_many(ns, [1, 2, 3])
    await eventually(lambda: all(len(hook.delivered(s)) == 3 for s in (bobs, trusted, carols)), timeout=20)
    mine = [i for p in hook.of(bobs) for i in p.ids]
    confirmed_by_endpoint = [i for p in hook.of(trusted) for i in p.ids]
    theirs = [i for p in hook.of(carols) for i in p.ids]

    async def confirm(as_: str, ids: list[int]) -> list[tuple[str, str]]:
        answer = await env.api("icrc72_confirm_notifications", ids, as_=as_)
        if "allAccepted" in answer:
            return [("Ok", "")] * len(ids)
        out = []
        for item, i in zip(answer["itemized"], ids, strict=True):
            if "Ok" in item:
                out.append(("Ok", ""))
            else:
                ((code, message),) = item["Err"].items()
                out.append((code, message.replace(str(i), "<id>")))
        return out

    never = max(mine + theirs + confirmed_by_endpoint) + 1000
    # carol: bob's pending, bob's confirmed by his endpoint, an id never issued, her own.
    await eventually(lambda: _settled(env, trusted, 3))
    answer = await confirm("carol", [mine[0], confirmed_by_endpoint[0], never, theirs[0]])
    refusals = answer[:3]
    assert {code for code, _ in refusals} == {"Unauthorized"}
    assert len(set(refusals)) == 1, refusals  # one and the same refusal: nothing told apart
    assert answer[3] == ("Ok", "")
    # bob confirms his, twice (idempotent); carol is still refused, item by item.
    assert await confirm("bob", mine + confirmed_by_endpoint) == [("Ok", "")] * 6
    assert await confirm("bob", mine) == [("Ok", "")] * 3
    assert await confirm("carol", [mine[1], theirs[1], mine[2]]) == [refusals[0], ("Ok", ""), refusals[0]]
    assert await confirm("bob", [theirs[2]]) == [(refusals[0][0], refusals[0][1].replace("carol", "bob"))]
    assert (await env.sub_stats(bobs))[CONFIRMATIONS] == 3
    assert (await env.sub_stats(carols))[CONFIRMATIONS] == 2


async def _settled(env: Env, sub: int, n: int) -> bool:
    return (await env.sub_stats(sub))[CONFIRMATIONS] == n


# -- 6. statistics and dead-letter reasons --------------------------------------------------------


class ConfirmingHook(Hook):
    """A ``Hook`` that, for the subscriptions in ``confirm_first``, confirms each push through
    the API before it answers it (the subscriber's own call racing the push's answer)."""

    def __init__(self, env: Env, who: str) -> None:
        super().__init__()
        self.env, self.who = env, who
        self.confirm_first: set[int] = set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        sub = int(dict(scope["headers"])[b"x-tidings-subscription"])
        if sub in self.confirm_first:
            await self.env.api("icrc72_confirm_notifications", [n["id"] for n in json.loads(body)], as_=self.who)
        sent = False

        async def again() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await super().__call__(scope, again, send)


async def test_statistics_count_sent_confirmed_retried_dead_lettered_exactly(env: Env, endpoints: Any) -> None:
    ns = "com.example.exact"
    await env.principals("alice", "bob")
    hook = ConfirmingHook(env, "bob")
    ep = await endpoints(hook)
    alice = env.pub("alice")
    await alice.register_publication(ns)
    bob, bob1 = env.sub("bob"), env.sub("bob", "oneshot")
    failing = await bob.subscribe(ns, ep.url, config={MAX_ATTEMPTS: 2})
    racing = await bob1.subscribe(ns, ep.url)
    late = await bob1.subscribe(ns, ep.url, config={ACK_DEADLINE_MS: 300, MAX_ATTEMPTS: 100})
    hook.status[failing] = 500
    hook.confirm_first.add(racing)

    e1 = await alice.publish(ns, 1)
    (letter,) = await letters(bob, 1, failing)
    assert (letter.eventId, letter.reason, letter.attempts) == (e1, "attempts_exhausted", 2)
    await eventually(lambda: len(hook.of(late)) >= 3, timeout=20)  # pushed again twice at least
    await bob1.confirm(hook.of(late)[0].ids)
    pushes_late = len(hook.of(late))

    async def stats_of(s: int) -> dict[str, int]:
        st = await env.sub_stats(s)
        return {k: st[k] for k in (RECORDED, NOTIFICATIONS, CONFIRMATIONS, RETRIES, DEAD_LETTERS)}

    want = {
        # Never taken by its endpoint: recorded, not sent; one retry, then given up on.
        failing: {RECORDED: 1, NOTIFICATIONS: 0, CONFIRMATIONS: 0, RETRIES: 1, DEAD_LETTERS: 1},
        # Confirmed before its push was answered: sent once all the same.
        racing: {RECORDED: 1, NOTIFICATIONS: 1, CONFIRMATIONS: 1, RETRIES: 0, DEAD_LETTERS: 0},
    }
    for s, w in want.items():
        await eventually(lambda s=s, w=w: _equal(stats_of(s), w), timeout=20)
    got = await stats_of(late)
    assert got[NOTIFICATIONS] == 1 and got[CONFIRMATIONS] == 1  # sent once, however often pushed
    assert got[RETRIES] in (pushes_late - 1, pushes_late)  # one more re-push may have been on its way
    await quiet(1.0)
    assert len(hook.of(late)) <= pushes_late + 1
    assert (await stats_of(racing))[NOTIFICATIONS] == 1
    m, _ = await env.metrics()
    assert m["tidings_notifications_sent_total"] == sum(len(p.ids) for p in hook.pushes if p.status == 200)


async def _equal(got: Any, want: dict[str, int]) -> bool:
    return await got == want
