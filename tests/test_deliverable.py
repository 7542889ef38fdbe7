"""``Registry.deliverable``: the one rule for which events a subscription is sent, with
its shortcuts, against the rule applied event by event (subscriber lists in force at
each event's seq, then the filter, then skip)."""

from __future__ import annotations

import random
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.broker.registry import Registry
from tidings.core import config as cfg
from tidings.store import StoredEvent

NS, OTHER = "com.example.orders", "com.example.other"
PRINCIPALS = ["alice", "bob", "carol"]


def _event(seq: int, namespace: str, amount: int) -> StoredEvent:
    return StoredEvent(
        seq=seq, namespace=namespace, id=seq, prev_id=None, timestamp=seq, source="p",
        data=msgspec.json.encode({"Map": [["amount", {"Nat": amount}]]}), headers=b"[]",
    )


def _data(e: StoredEvent) -> Any:
    return msgspec.json.decode(e.data)


def _lists(allowed: list[str] | None, denied: list[str]) -> cfg.PublicationConfig:
    return cfg.PublicationConfig(
        subscribers_allowed=None if allowed is None else frozenset(allowed), subscribers_disallowed=frozenset(denied)
    )


_lists_st = st.builds(
    _lists, st.none() | st.lists(st.sampled_from(PRINCIPALS), unique=True), st.lists(st.sampled_from(PRINCIPALS))
)


def _sub_config(filter_text: str | None, skip: tuple[int, int] | None) -> cfg.SubscriptionConfig:
    pairs: list[list[Any]] = []
    if filter_text is not None:
        pairs.append([cfg.FILTER, {"Text": filter_text}])
    if skip is not None:
        pairs.append([cfg.SKIP, {"Array": [{"Nat": skip[0]}, {"Nat": skip[1]}]}])
    return cfg.SubscriptionConfig.read(pairs)


_sub_st = st.builds(
    _sub_config,
    st.none() | st.sampled_from(["amount >= 5", "amount < 3"]),
    st.none() | st.tuples(st.integers(1, 4), st.integers(0, 4)),
)


def _by_event(reg: Registry, principal: str, conf: cfg.SubscriptionConfig, events: list[StoredEvent]) -> list[int]:
    return [
        e.seq for e in events
        if reg.subscriber_allowed(e.namespace, principal, e.seq) and conf.passes(e.id, _data(e))
    ]


@settings(max_examples=300, deadline=None)
@given(
    current=_lists_st,
    history=st.lists(st.tuples(st.integers(1, 40), _lists_st), max_size=3),
    sub=_sub_st,
    principal=st.sampled_from(PRINCIPALS),
    amounts=st.lists(st.integers(0, 9), max_size=30),
    first=st.integers(1, 30),
    mixed=st.booleans(),
    shuffled=st.booleans(),
)
def test_deliverable_is_the_rule_applied_to_each_event(
    current: cfg.PublicationConfig,
    history: list[tuple[int, cfg.PublicationConfig]],
    sub: cfg.SubscriptionConfig,
    principal: str,
    amounts: list[int],
    first: int,
    mixed: bool,
    shuffled: bool,
) -> None:
    reg = Registry()
    reg.pub_configs[NS] = current
    reg.pub_configs[OTHER] = _lists(None, [principal])  # refuses this principal
    if history:
        reg.configs_before[NS] = sorted(history, key=lambda h: h[0])
    events = [
        _event(first + k, OTHER if mixed and k % 3 == 2 else NS, a) for k, a in enumerate(amounts)
    ]
    if shuffled:
        random.Random(first).shuffle(events)  # no order is assumed
    want = _by_event(reg, principal, sub, events)
    assert [e.seq for e in reg.deliverable(principal, sub, events, _data)] == want
    if not mixed:  # every event is of NS: the caller may say so
        assert [e.seq for e in reg.deliverable(principal, sub, events, _data, NS)] == want


def test_a_refused_subscriber_is_sent_nothing_and_no_filter_runs() -> None:
    reg = Registry()
    reg.pub_configs[NS] = _lists(["alice"], [])
    events = [_event(s, NS, 1) for s in range(1, 5)]

    def never(e: StoredEvent) -> Any:
        raise AssertionError("the filter ran for a subscriber the lists refuse")

    assert reg.deliverable("bob", _sub_config("amount >= 0", None), events, never, NS) == []
    assert reg.deliverable("alice", _sub_config(None, None), events, never, NS) == events


def test_the_lists_in_force_at_each_seq_apply_in_any_order_of_events() -> None:
    reg = Registry()
    reg.pub_configs[NS] = _lists(None, [])
    reg.configs_before[NS] = [(5, _lists(None, ["alice"]))]  # alice was refused up to seq 5
    events = [_event(6, NS, 1), _event(3, NS, 1), _event(7, NS, 1)]
    got = reg.deliverable("alice", _sub_config(None, None), events, _data, NS)
    assert [e.seq for e in got] == [6, 7]
