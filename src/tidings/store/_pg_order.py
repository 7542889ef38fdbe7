"""The order in which the PostgreSQL store's overlapping group commits are answered.

The appender (``_pg_events``) lets a second group's ``tidings_append`` start while the
first one's answer is still on its way: a database a network away then costs a publish
one round trip, not the rest of the previous group's plus its own. The groups are
answered in the order they were sent, which is the order the server numbers them in
whenever their calls reach it in that order (``log_head``'s lock goes to whichever comes
first): the broker then hears of its events in ``seq`` order as before. Should two calls
on their two connections overtake each other on the way, the later ``seq`` is heard of
first: the tail holds it until the earlier one comes (``Tail.extend``), as it does for
another broadcaster's commits, so nothing is lost or reordered for a subscriber. Waiting
instead for every group that could hold a lower ``seq`` would make each group wait for
the next one sent, a round trip more.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Sequencer"]


class Sequencer:
    def __init__(self) -> None:
        self._next = 0
        self._due = 0
        """The ticket answered next."""
        self._finished: dict[int, Callable[[], None]] = {}

    def start(self) -> int:
        """A group is sent: its ticket."""
        ticket, self._next = self._next, self._next + 1
        return ticket

    def finish(self, ticket: int, settle: Callable[[], None]) -> None:
        """The group's outcome is known: ``settle`` answers it once every group sent
        before it is answered."""
        self._finished[ticket] = settle
        while (nxt := self._finished.pop(self._due, None)) is not None:
            self._due += 1
            nxt()

    def abandon(self) -> list[Callable[[], None]]:
        """The appender stops: every finished group's answer, to be given now."""
        out = [self._finished[t] for t in sorted(self._finished)]
        self._finished.clear()
        return out
