"""The one clock a broadcaster stamps and compares by (docs/semantics.md, "Time").

Every time another process or a user compares (event timestamps, retention cut-offs,
the ages and deadlines of notifications, replay and dead-letter times, relay
signatures, ``webhook-timestamp``, expiries) is read from a :class:`Clock`, never from
the wall clock. A clock runs on the monotonic clock, which never steps, from an anchor:

* alone, the wall clock when the process started: a later step of the wall clock (an
  NTP step, a VM resumed from a snapshot) moves nothing;
* in a cluster, the shared store's clock (PostgreSQL's ``clock_timestamp()``), read at
  every heartbeat: the reading is taken to be the store's time at the midpoint of the
  round trip, with half the round trip as its error bar (Cristian's algorithm, as NTP).

So within a process time never goes backwards, and in a cluster every member is within
``uncertainty_ns()`` of the store's clock, whatever its own wall clock says.

Pure: the wall and monotonic readings are passed in (``time.time_ns`` and
``time.monotonic_ns`` in the broker, fakes in tests).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["DRIFT_PPM", "Clock", "later"]

DRIFT_PPM = 500
"""How fast a monotonic clock may run against true time, in parts per million: the bound
of an unsynchronised quartz oscillator (NTP's tolerance is 500 ppm). Counted into the
uncertainty for the time since the last reading of the shared clock."""


def later(now_ns: int, previous_ns: int | None) -> int:
    """An event's timestamp: the later of now and its namespace's previous one, so that
    timestamps never go backwards as ids increase (a hybrid logical clock's physical
    part; ids break the ties)."""
    return now_ns if previous_ns is None or now_ns >= previous_ns else previous_ns


class Clock:
    def __init__(self, wall_ns: Callable[[], int], monotonic_ns: Callable[[], int]) -> None:
        self._wall = wall_ns
        self._mono = monotonic_ns
        at = monotonic_ns()
        self._base = wall_ns()
        """The time at the anchor: the wall clock at start, then the shared clock's readings."""
        self._at = at
        self._error = 0
        self._last = 0
        self.shared = False
        """True once the shared store's clock has been read: the anchor is that clock's."""
        self.offset_ns = 0
        """The shared clock minus this process's wall clock, at the last reading taken."""
        self.readings = 0

    def now_ns(self) -> int:
        """The time now, in Unix nanoseconds: never earlier than a time it gave before."""
        t = self._base + (self._mono() - self._at)
        if t < self._last:  # re-anchored onto a reading a little behind: wait for it
            return self._last
        self._last = t
        return t

    def monotonic_ns(self) -> int:
        return self._mono()

    def wall_ns(self) -> int:
        return self._wall()

    def skew_ns(self) -> int:
        """This process's wall clock minus this clock, now: alone, how far the wall clock
        has stepped since the start; in a cluster, its offset to the shared clock."""
        return self._wall() - self.now_ns()

    def uncertainty_ns(self) -> int:
        """How far this clock may be from its anchor's clock now: the reading's error bar
        plus what the monotonic clock may have drifted since."""
        return self._error + (self._mono() - self._at) * DRIFT_PPM // 1_000_000

    def observe(self, shared_ns: int, wall_sent_ns: int, mono_sent_ns: int, mono_received_ns: int) -> bool:
        """A reading ``shared_ns`` of the shared clock, asked for at ``wall_sent_ns`` on the
        wall clock and ``mono_sent_ns`` on the monotonic one, answered at
        ``mono_received_ns``. Re-anchors on it unless it is less certain than the clock
        already is (a reading slowed down by a loaded store); returns whether it did."""
        half = max(0, mono_received_ns - mono_sent_ns) // 2
        mid = mono_sent_ns + half
        self.offset_ns = shared_ns - (wall_sent_ns + half)
        self.readings += 1
        if not self.shared:  # the first reading replaces the local anchor, ahead or behind
            self._last = 0
        elif half > self._error + (mid - self._at) * DRIFT_PPM // 1_000_000:
            return False
        self._base, self._at, self._error = shared_ns, mid, half
        self.shared = True
        return True
