"""Watching this process's wall clock against the clock everything is stamped by.

Nothing in the broker reads the wall clock: every time it stamps or compares comes from
the store's :class:`~tidings.core.clock.Clock` (the database's clock with several
broadcasters, measured at each heartbeat; alone, the wall clock at start carried on by
the monotonic clock). A wall clock that is off therefore misdates nothing, but it is a
fault the operator should hear of: once it is surely off by more than
``TIDINGS_MAX_CLOCK_OFFSET_S`` (the offset less the measurement's error bar), one log line
names both clocks and the offset, ``tidings_clock_offset_seconds`` shows it, and with
several broadcasters ``/readyz`` reports it until the clocks agree again.
"""

from __future__ import annotations

import datetime as dt
import logging

from ...core.clock import Clock

__all__ = ["ClockWatch"]

log = logging.getLogger("tidings.clock")


def _iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="milliseconds")


class ClockWatch:
    def __init__(self, clock: Clock, *, max_offset_s: float, shared: bool, me: str) -> None:
        self._clock = clock
        self._max_ns = int(max_offset_s * 1e9)
        self._shared = shared
        self._me = me
        self.off = False
        """The wall clock is surely further than the bound from the cluster's clock."""
        self.offset_s = 0.0
        """This process's wall clock minus the cluster's clock, at the last check."""
        self.uncertainty_s = 0.0

    def check(self) -> None:
        c = self._clock
        wall, now = c.wall_ns(), c.now_ns()
        skew, error = wall - now, c.uncertainty_ns()
        self.offset_s, self.uncertainty_s = skew / 1e9, error / 1e9
        off = abs(skew) - error > self._max_ns
        if off == self.off:
            return
        self.off = off
        which = "the database's clock" if self._shared else "the clock it started with (monotonic since)"
        if off:
            log.warning(
                "clock: the wall clock of %s reads %s, %s reads %s: off by %+.3f s (±%.3f s), more than "
                "TIDINGS_MAX_CLOCK_OFFSET_S=%.3f; every time is stamped and compared by the latter, the wall clock "
                "is not used", self._me, _iso(wall), which, _iso(now), skew / 1e9, error / 1e9, self._max_ns / 1e9,
            )
        else:
            log.warning("clock: the wall clock of %s is within %.3f s of %s again (%+.3f s)",
                        self._me, self._max_ns / 1e9, which, skew / 1e9)

    def problems(self) -> list[str]:
        """What ``/readyz`` reports: with several broadcasters, a wall clock off the
        database's (alone, a step is only logged: the one broadcaster keeps serving)."""
        if not (self._shared and self.off):
            return []
        return [f"the wall clock of {self._me} is off the database's clock by {self.offset_s:+.3f} s, more than "
                f"TIDINGS_MAX_CLOCK_OFFSET_S={self._max_ns / 1e9:g}"]
