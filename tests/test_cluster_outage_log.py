"""The cluster's loops meet a store outage each on its own; the log tells it once each
way (broker/cluster/_outage.py), and tells a refusal that is not an outage as it comes."""

from __future__ import annotations

import logging

import pytest

from tidings.broker.cluster import Outage
from tidings.errors import StoreError, StoreUnavailable


def test_an_outage_is_one_line_when_it_starts_and_one_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    now = [10.0]
    o = Outage(logging.getLogger("tidings.cluster.test"), lambda: now[0])
    with caplog.at_level(logging.WARNING, "tidings.cluster.test"):
        o.back()  # nothing to end
        o.failed("a heartbeat", StoreUnavailable("connection refused"))
        for doing in ("reading the log", "reloading the registry", "a heartbeat"):
            o.failed(doing, StoreUnavailable("connection refused"))
        o.failed("a heartbeat", TimeoutError())
        now[0] = 13.5
        o.back()
        o.back()
        o.failed("recording 2 assignment change(s)", StoreError("refused: a check failed"))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said
    assert said[0].startswith("a heartbeat failed: connection refused") and "waits for the store" in said[0]
    assert said[1] == "the store answers again after 3.5 s; 5 round(s) of the cluster's work failed meanwhile"
    assert said[2] == "recording 2 assignment change(s) failed: refused: a check failed"


def test_a_hang_starts_an_outage_too(caplog: pytest.LogCaptureFixture) -> None:
    o = Outage(logging.getLogger("tidings.cluster.test"))
    with caplog.at_level(logging.WARNING, "tidings.cluster.test"):
        o.failed("a heartbeat, which took longer than the lease term (5.0 s),", TimeoutError())
        o.failed("reading the log", StoreUnavailable("x"))
    assert [r.getMessage() for r in caplog.records] == [
        "a heartbeat, which took longer than the lease term (5.0 s), failed: no answer in time; "
        "the cluster's work waits for the store (said once until it is back)"
    ]
