"""What each front process refused or holds itself, as it reports it to its broker
(``front.app``: every second, on the broker's private socket), for ``/metrics``.

A front refuses publishes past its own caps before the broker sees them, and answers 503
when the broker cannot be reached: those refusals never reach the broker's counters, and
a scrape answered by the broker (or by any front: they relay ``/metrics``) must still show
them. Counters are summed over the fronts the broker has heard from, a restarted front's
last report included, so they never go down; the gauges are the latest reports'."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

__all__ = ["FrontReport", "FrontReports", "decode_report"]

_MAX_FRONTS = 256
"""Reports kept at most (fronts are restarted under new process ids): the oldest go."""
_FRESH_S = 5.0
"""A report older than this (its front is gone) still counts its refusals, not its gauges."""
REASONS = ("bytes", "requests", "broker_unreachable")


class FrontReport(msgspec.Struct, frozen=True):
    pid: int
    refused: dict[str, int] = {}
    """Publishes refused by this front since it started, by reason (``REASONS``)."""
    retried: int = 0
    """Requests sent once more after the broker closed their pooled connection."""
    waiting_requests: int = 0
    waiting_bytes: int = 0


decode_report = msgspec.json.Decoder(FrontReport).decode


class FrontReports:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._by_pid: dict[int, tuple[FrontReport, float]] = {}
        self._monotonic = monotonic

    def update(self, report: FrontReport) -> None:
        self._by_pid.pop(report.pid, None)
        self._by_pid[report.pid] = (report, self._monotonic())
        while len(self._by_pid) > _MAX_FRONTS:
            del self._by_pid[next(iter(self._by_pid))]

    def render(self, prefix: str = "tidings") -> str:
        reports = [r for r, _ in self._by_pid.values()]
        fresh = [r for r, at in self._by_pid.values() if self._monotonic() - at <= _FRESH_S]
        out = [
            f"# HELP {prefix}_front_refused_total Publishes the front processes refused themselves, by reason "
            "(their own caps, TIDINGS_MAX_WAITING_BYTES and _REQUESTS; the broker not reachable).",
            f"# TYPE {prefix}_front_refused_total counter",
        ]
        for reason in REASONS:
            n = sum(max(0, r.refused.get(reason, 0)) for r in reports)
            out.append(f'{prefix}_front_refused_total{{reason="{reason}"}} {n}')
        out += [
            f"# HELP {prefix}_front_retried_total Requests the fronts sent once more on a new connection "
            "after the broker closed their pooled one.",
            f"# TYPE {prefix}_front_retried_total counter",
            f"{prefix}_front_retried_total {sum(max(0, r.retried) for r in reports)}",
            f"# HELP {prefix}_front_waiting_requests Publishes the fronts hold that the broker has not answered.",
            f"# TYPE {prefix}_front_waiting_requests gauge",
            f"{prefix}_front_waiting_requests {sum(max(0, r.waiting_requests) for r in fresh)}",
            f"# HELP {prefix}_front_waiting_bytes Bytes of the publishes the fronts hold.",
            f"# TYPE {prefix}_front_waiting_bytes gauge",
            f"{prefix}_front_waiting_bytes {sum(max(0, r.waiting_bytes) for r in fresh)}",
        ]
        return "\n".join(out) + "\n"
