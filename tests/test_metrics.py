"""The delivery latency histogram of ``/metrics`` against its definition: each confirmed
notification counted once, in the first bucket whose bound is at least its latency
(Prometheus ``le``), a negative age (clocks) as zero."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidings.broker.metrics import LATENCY_BUCKETS, Metrics

from .test_e2e_guarantees import parse_metrics

_ages = st.lists(st.integers(min_value=-10**9, max_value=100 * 10**9), max_size=50)


@given(st.lists(_ages, max_size=5))
def test_confirmations_fall_in_the_buckets_prometheus_expects(batches: list[list[int]]) -> None:
    m = Metrics()
    now = 10**18
    for ages in batches:
        m.confirmed(now, [now - a for a in ages])
    seconds = [max(0, a) / 1e9 for ages in batches for a in ages]
    page = parse_metrics(m.render({}))
    name = "tidings_delivery_latency_seconds"
    for bound in LATENCY_BUCKETS:
        assert int(page[f'{name}_bucket{{le="{bound}"}}']) == sum(1 for v in seconds if v <= bound)
    assert int(page[f'{name}_bucket{{le="+Inf"}}']) == len(seconds) == int(page[f"{name}_count"])
    assert int(page["tidings_notifications_confirmed_total"]) == len(seconds)
    assert abs(float(page[f"{name}_sum"]) - sum(seconds)) < 1e-6 * max(1.0, sum(seconds))
