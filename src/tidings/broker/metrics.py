"""Process metrics in the Prometheus text format (version 0.0.4), served at ``/metrics``.

Counters and a histogram live in memory and count since the process started, as
Prometheus expects; a restart shows as a counter reset. Gauges that describe stored
state (pending notifications per subscription) are read from the store at scrape time.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = ["ClusterView", "Metrics"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ClusterView(NamedTuple):
    """What ``/metrics`` shows of the broadcasters sharing the store, from this one."""

    me: str
    leases_held: int
    alive: int


def _label(value: str) -> str:
    """A label value escaped as the text format asks (a broadcaster id is an operator's string)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0


class Metrics:
    def __init__(self) -> None:
        self.events_published = 0
        self.notifications_sent = 0
        """Notification pushes the endpoint took (a 2xx answer, not an itemized ``Err``); a
        push that got no answer, an error answer or back-pressure is not a send."""
        self.notifications_confirmed = 0
        self.notifications_retried = 0
        self.notifications_deferred = 0
        """Notification pushes answered with back-pressure (429/503 with Retry-After)."""
        self.notifications_dead_lettered = 0
        self.subscriptions_ended = 0
        self.worker_restarts = 0
        self.worker_runs = 0
        """Subscription worker tasks started: one per running subscription at startup, and
        one per start after a stop. A stopped subscription holds no task."""
        self.clock_offset_s = 0.0
        """This process's wall clock minus the clock it stamps by (``core.clock``)."""
        self.clock_uncertainty_s = 0.0
        self.latency = _Histogram(LATENCY_BUCKETS)
        """Seconds from the broadcaster's acceptance of an event to its confirmation."""

    def confirmed(self, now_ns: int, accepted_ns: Iterable[int]) -> None:
        """Notifications confirmed at ``now_ns``, of events accepted at ``accepted_ns``.
        (Inlined rather than one ``observe`` per notification: this runs for every
        confirmation, and was 5 % of the broker's time in fan-out.)"""
        h = self.latency
        buckets, counts, where = h.buckets, h.counts, bisect.bisect_left
        n, total = 0, 0.0
        for ts in accepted_ns:
            v = (now_ns - ts) / 1e9
            if v < 0.0:
                v = 0.0
            counts[where(buckets, v)] += 1
            total += v
            n += 1
        h.sum += total
        h.count += n
        self.notifications_confirmed += n

    def render(
        self, pending: Mapping[int, int], workers_running: int = 0, cluster: ClusterView | None = None
    ) -> str:
        out: list[str] = []

        def counter(name: str, help_: str, value: int) -> None:
            out.extend((f"# HELP {name} {help_}", f"# TYPE {name} counter", f"{name} {value}"))

        counter("tidings_events_published_total", "Events accepted and stored.", self.events_published)
        counter("tidings_notifications_sent_total", "Notification pushes the endpoint took (2xx, not an itemized Err).",
                self.notifications_sent)
        counter("tidings_notifications_confirmed_total", "Notifications confirmed.", self.notifications_confirmed)
        counter("tidings_notifications_retried_total", "Notification pushes that repeated a failed or unconfirmed one.",
                self.notifications_retried)
        counter("tidings_notifications_deferred_total",
                "Notification pushes answered 429/503 with Retry-After: delayed, not counted as tries.",
                self.notifications_deferred)
        counter("tidings_notifications_dead_lettered_total", "Notifications moved to the dead letters.",
                self.notifications_dead_lettered)
        counter("tidings_subscriptions_ended_total", "Subscriptions ended by delivery (410 Gone, error answers).",
                self.subscriptions_ended)
        counter("tidings_delivery_worker_restarts_total",
                "Subscription workers restarted after an unexpected error (logged with its traceback).",
                self.worker_restarts)
        counter("tidings_delivery_worker_runs_total",
                "Subscription worker tasks started (at startup, and when a stopped subscription starts).",
                self.worker_runs)
        name = "tidings_delivery_workers_running"
        out.extend((f"# HELP {name} Subscriptions with a worker task now (a stopped one has none).",
                    f"# TYPE {name} gauge", f"{name} {workers_running}"))
        name = "tidings_notifications_pending"
        out.extend((f"# HELP {name} Notifications recorded and not yet confirmed, per subscription.",
                    f"# TYPE {name} gauge"))
        out.extend(f'{name}{{subscription="{sub}"}} {n}' for sub, n in sorted(pending.items()))
        if cluster is not None:
            me = f'{{broadcaster="{_label(cluster.me)}"}}'
            name = "tidings_leases_held"
            out.extend((f"# HELP {name} Subscription delivery leases this broadcaster holds (0 when it is "
                        "the only one: it delivers every subscription without leases).",
                        f"# TYPE {name} gauge", f"{name}{me} {cluster.leases_held}"))
            name = "tidings_broadcasters_alive"
            out.extend((f"# HELP {name} Broadcasters alive at this one's last heartbeat, itself included.",
                        f"# TYPE {name} gauge", f"{name}{me} {cluster.alive}"))
        name = "tidings_clock_offset_seconds"
        out.extend((f"# HELP {name} This process's wall clock minus the cluster's clock (the database's with "
                    "several broadcasters; alone, the wall clock at start carried on by the monotonic clock): "
                    "nothing is stamped by the wall clock.", f"# TYPE {name} gauge", f"{name} {self.clock_offset_s}"))
        name = "tidings_clock_uncertainty_seconds"
        out.extend((f"# HELP {name} How far the cluster's clock as this process reads it may be from the "
                    "database's: half the last heartbeat's round trip plus the drift since.",
                    f"# TYPE {name} gauge", f"{name} {self.clock_uncertainty_s}"))
        name = "tidings_delivery_latency_seconds"
        h = self.latency
        out.extend((f"# HELP {name} From the broadcaster's acceptance of an event to its confirmation.",
                    f"# TYPE {name} histogram"))
        running = 0
        for bound, n in zip(h.buckets, h.counts, strict=False):
            running += n
            out.append(f'{name}_bucket{{le="{bound}"}} {running}')
        out.append(f'{name}_bucket{{le="+Inf"}} {h.count}')
        out.append(f"{name}_sum {h.sum}")
        out.append(f"{name}_count {h.count}")
        return "\n".join(out) + "\n"
