"""The pure ICRC-77 rules: states, ranges, the request config, pricing, headers."""

from __future__ import annotations

import json

import pytest

from tidings.core import config as cfg
from tidings.core import replay as r


def test_state_machine() -> None:
    assert r.can_move("pending", "running")
    assert r.can_move("pending", "canceled")
    assert r.can_move("running", "completed")
    assert r.can_move("running", "errored")
    assert not r.can_move("running", "pending")
    for done in r.TERMINAL:
        assert not any(r.can_move(done, s) for s in r.STATES)


def test_ranges() -> None:
    assert r.resolve_range(3, 7, 10, 100) == (3, 7)
    assert r.resolve_range(0, None, 10, 100) == (1, 11)  # up to the last event, ids from 1
    assert r.resolve_range(5, 11, 10, 100) == (5, 11)
    for start, end in [(5, 5), (7, 3), (11, None)]:
        with pytest.raises(r.ReplayRuleError) as e:
            r.resolve_range(start, end, 10, 100)
        assert e.value.code == "ImproperConfig"
    with pytest.raises(r.ReplayRuleError) as e:
        r.resolve_range(1, 12, 10, 100)  # ends after the last event
    assert e.value.code == "ImproperConfig"
    with pytest.raises(r.ReplayRuleError) as e:
        r.resolve_range(1, 11, 10, 9)
    assert e.value.code == "RangeTooLarge"
    assert "10 events" in e.value.message


def test_config_takes_the_request_then_the_subscription() -> None:
    sub = [[cfg.FILTER, {"Text": "n > 1"}], [cfg.SKIP, {"Nat": 2}]]
    own = r.ReplayConfig.read([], sub)
    assert own.filter == "n > 1" and own.rules.skip == (2, 0)
    mine = r.ReplayConfig.read([[cfg.FILTER, {"Option": {"Text": "n > 5"}}], [r.SUBSCRIPTION, {"Nat": 4}]], sub)
    assert (mine.filter, mine.subscription, mine.rules.skip) == ("n > 5", 4, (2, 0))
    assert mine.rules.passes(8, {"Map": [["n", {"Nat": 6}]]})
    assert not mine.rules.passes(7, {"Map": [["n", {"Nat": 6}]]})  # skip: even ids only
    none = r.ReplayConfig.read([[cfg.FILTER, {"Option": None}]], sub)  # explicitly no filter
    assert none.filter is None
    for bad in ([[cfg.FILTER, {"Text": "n >"}]], [[cfg.SKIP, {"Text": "x"}]], [[r.SUBSCRIPTION, {"Text": "1"}]]):
        with pytest.raises(r.ReplayRuleError) as e:
            r.ReplayConfig.read(bad)
        assert e.value.code == "ImproperConfig"


def test_pricing() -> None:
    klass = {"Class": [{"name": "perEvent", "value": {"Nat": 3}, "immutable": False},
                       {"name": "currency", "value": {"Text": "icrc1:ckUSDC"}, "immutable": False}]}
    assert r.read_pricing([[r.PRICING, klass]]) == r.Pricing(3, "icrc1:ckUSDC")
    assert r.read_pricing([[r.PRICING, {"Map": [["perEvent", {"Nat": 2}]]}]]) == r.Pricing(2)
    assert r.read_pricing([]) is None
    assert r.cost(r.Pricing(3), 10) == 30
    assert r.cost(None, 10) == 0
    with pytest.raises(cfg.ImproperConfig):
        r.read_pricing([[r.PRICING, {"Map": [["perEvent", {"Text": "2"}]]}]])
    with pytest.raises(cfg.ImproperConfig):
        r.read_pricing([[r.PRICING, {"Nat": 2}]])


def test_headers_are_appended() -> None:
    got = json.loads(r.with_replay_headers(b'[["a",{"Nat":1}]]', 7, None))
    assert got == [["a", {"Nat": 1}], [r.ID_HEADER, {"Nat": 7}]]
    got = json.loads(r.with_replay_headers(b"[]", 7, 42))
    assert got == [[r.ID_HEADER, {"Nat": 7}], [r.END_HEADER, {"Nat": 42}]]
