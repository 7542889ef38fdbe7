"""Retrying a publish whose outcome is unknown, with the same idempotency keys.

Each event carries a key of its own (a time-ordered UUID, ``core.keys``, unless the caller
gave one), so a
publish sent again is answered, for the events stored the first time, with the ids they
were stored under (``repeat``), and stores the others: retrying is safe whatever the
first try did (docs/semantics.md, "Exactly once").
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from typing import Final

from msgspec import UNSET, structs

from ..core.ingest import ERR_MAYBE_STORED
from ..core.keys import RANDOM_BYTES, uuid7
from ..core.wire import Event, GenericError, ItemResult
from ._errors import PublishUncertain

__all__ = ["RETRY_STATUSES", "Backoff", "keyed", "new_key", "unsettled"]

RETRY_STATUSES: Final = frozenset({429, 502, 503, 504})
"""Answers that say nothing was done, or not yet: the same keys are sent again."""
_FIRST_S: Final = 0.1
_MAX_S: Final = 5.0


def new_key() -> str:
    """A new idempotency key: time-ordered, so the store's key index takes it cheaply."""
    return uuid7(time.time_ns() // 1_000_000, os.urandom(RANDOM_BYTES))


def keyed(e: Event) -> Event:
    """``e`` with an idempotency key: its own, or a new one."""
    return e if e.idempotencyKey is not None else structs.replace(e, idempotencyKey=new_key())


def unsettled(r: ItemResult | None) -> bool:
    """Whether an item's answer leaves its event to be sent again: not processed, ``Busy``,
    a ``GenericBatchError`` of a failed commit (nothing took effect), or the item error that
    says the outcome is unknown. A batch too large is final: sending it again cannot help."""
    if r is None:
        return True
    e = r.Err
    if e is UNSET:
        return False
    code = e.code
    if code == "Busy":
        return True
    if code == "GenericBatchError":
        return "at most" not in str(e.GenericBatchError)
    g = e.GenericError
    return code == "GenericError" and isinstance(g, GenericError) and g.error_code == ERR_MAYBE_STORED


class Backoff:
    """Pauses between tries until ``deadline_s`` after the first: exponential with full
    jitter, or the server's ``Retry-After`` when it gave one."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self._end = time.monotonic() + deadline_s
        self._ceiling = _FIRST_S

    def left(self) -> float:
        return self._end - time.monotonic()

    def pause(self, retry_after_s: float | None = None) -> float | None:
        """How long to wait before the next try, or None when it would pass the deadline."""
        self._ceiling = min(self._ceiling * 2, _MAX_S)
        p = retry_after_s if retry_after_s is not None else random.uniform(0, self._ceiling)
        return None if time.monotonic() + p >= self._end else p

    def gave_up(self, events: Sequence[Event], problem: object) -> PublishUncertain:
        keys = ", ".join(str(e.idempotencyKey) for e in events[:3])
        return PublishUncertain(
            f"icrc72_publish: {len(events)} event(s) not settled within the {self.deadline_s:g} s deadline "
            f"({problem}): they may have been stored; publishing them again with the same idempotency keys "
            f"({keys}{', ...' if len(events) > 3 else ''}; PublishUncertain.events) is safe",
            list(events),
        )
