"""A store outage as the cluster's loops meet it: said once when it starts, and once
when a heartbeat gets through again, with how long it lasted; not once per loop and round
(a database restart made four lines a second per member)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ...errors import StoreUnavailable

__all__ = ["Outage"]


class Outage:
    def __init__(self, log: logging.Logger, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._monotonic = monotonic
        self.since: float | None = None
        self.rounds = 0

    def failed(self, doing: str, e: BaseException) -> None:
        """``doing`` failed with ``e``: the first failure of an outage is told, with its
        cause; the others while it lasts are counted. A failure that is not the store's
        outage (a refusal) is told as it comes."""
        if self.since is not None:
            self.rounds += 1
            return
        if not isinstance(e, StoreUnavailable | TimeoutError):
            self._log.warning("%s failed: %s", doing, e)
            return
        self.since, self.rounds = self._monotonic(), 1
        self._log.warning("%s failed: %s; the cluster's work waits for the store (said once until it is back)",
                          doing, str(e) or "no answer in time")

    def back(self) -> None:
        """A heartbeat got through: an outage in progress is over."""
        if self.since is None:
            return
        self._log.warning("the store answers again after %.1f s; %d round(s) of the cluster's work failed meanwhile",
                          self._monotonic() - self.since, self.rounds)
        self.since, self.rounds = None, 0
