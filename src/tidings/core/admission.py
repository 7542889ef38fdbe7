"""What may wait for the store, in bytes and in requests: one rule for the broker and
each front process (docs/operations.md, "Overload and a stalling store").

A server that queues every publish while its store is stalled turns a stall into an
out-of-memory kill. :class:`Admission` counts the publishes taken and not yet answered by
the store (their bodies, read or still arriving, count in bytes) and refuses a new one at
once past either cap, before its body is read when its length is declared. Pure: the
callers answer the refusal (503 with ``Retry-After``) and give back what they took.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["BYTES", "REQUESTS", "Admission"]

BYTES = "bytes"
"""Refusal reason: the bytes waiting would pass ``max_bytes``."""
REQUESTS = "requests"
"""Refusal reason: the requests waiting would pass ``max_requests``."""


class Admission:
    """Bytes and requests waiting, kept under ``max_bytes`` and ``max_requests``."""

    __slots__ = ("max_bytes", "max_requests", "refused", "waiting_bytes", "waiting_requests")

    def __init__(self, max_bytes: int, max_requests: int) -> None:
        if max_bytes < 1 or max_requests < 1:
            raise ValueError("the caps are at least 1")
        self.max_bytes = max_bytes
        self.max_requests = max_requests
        self.waiting_bytes = 0
        self.waiting_requests = 0
        self.refused: Counter[str] = Counter()
        """Refusals by reason since the start (``bytes``, ``requests``, and what callers
        count with :meth:`count`)."""

    def take(self, nbytes: int) -> str | None:
        """Take a request of ``nbytes`` (its declared length; 0 when unknown): None, or the
        reason it is refused (counted). A request alone is always taken when nothing
        waits, so a body larger than ``max_bytes`` is the size limit's to refuse."""
        nbytes = max(0, nbytes)
        if self.waiting_requests >= self.max_requests:
            return self.count(REQUESTS)
        if self.waiting_requests and self.waiting_bytes + nbytes > self.max_bytes:
            return self.count(BYTES)
        self.waiting_requests += 1
        self.waiting_bytes += nbytes
        return None

    def grow(self, taken: int, nbytes: int) -> str | None:
        """A body taken with ``taken`` bytes turned out to have ``nbytes`` (no declared
        length, or a longer one): account for the difference; the reason to refuse it if
        it no longer fits (counted; the caller then gives back ``nbytes``)."""
        extra = max(0, nbytes - taken)
        self.waiting_bytes += extra
        if extra and self.waiting_requests > 1 and self.waiting_bytes > self.max_bytes:
            return self.count(BYTES)
        return None

    def give_back(self, nbytes: int) -> None:
        """A request taken with ``nbytes`` (after any :meth:`grow`) is done with."""
        self.waiting_requests = max(0, self.waiting_requests - 1)
        self.waiting_bytes = max(0, self.waiting_bytes - max(0, nbytes))

    def count(self, reason: str) -> str:
        """Count a refusal for ``reason`` (the callers' own: a commit that timed out)."""
        self.refused[reason] += 1
        return reason

    @property
    def full(self) -> bool:
        """No new request would be taken now (a stream's publisher gets no new credit)."""
        return self.waiting_requests >= self.max_requests or self.waiting_bytes >= self.max_bytes

    def refused_total(self) -> int:
        return sum(self.refused.values())
