"""The clock a store stamps by, shared with the broker that uses it (``core.clock``)."""

from __future__ import annotations

import time

from ..core.clock import Clock

__all__ = ["Clocked"]


class Clocked:
    _clock: Clock | None = None

    @property
    def clock(self) -> Clock:
        """The clock this store stamps by (the times of notifications and deliveries), and
        its broker stamps and compares by: given to the backend's constructor, or made at
        first use on this process's clocks. A store several broadcasters share re-anchors
        it on the database's clock at each heartbeat (``ClusterStore.heartbeat``)."""
        if self._clock is None:
            self._clock = Clock(time.time_ns, time.monotonic_ns)
        return self._clock
