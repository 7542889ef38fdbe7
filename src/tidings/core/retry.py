"""How a push outcome is classified, and how long to wait before trying again.

Pure: the delivery worker feeds it what happened and a random number, and acts on
the answer. The rules (REFERENCE §6): a 2xx answer is an ack; ``410 Gone`` ends the
subscription; ``429``/``503`` with ``Retry-After`` wait that long (within the maximum);
anything else that is an answer is an *error answer*; no answer at all (connection
refused or reset, timeout) is a *failure*. Back-off doubles from an initial delay up to a
maximum, with jitter so that many subscriptions failing together do not retry in step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Backoff", "Outcome", "classify", "retry_after_seconds"]


class Outcome(enum.Enum):
    ACK = "ack"
    GONE = "gone"
    ERROR_ANSWER = "error_answer"
    """The endpoint answered, with an error (non-2xx, or an itemized ``Err``)."""
    NO_ANSWER = "no_answer"
    """Connection refused or reset, or no answer before the deadline."""


def classify(status: int | None) -> Outcome:
    """The outcome of a push from its HTTP status (``None``: no answer)."""
    if status is None:
        return Outcome.NO_ANSWER
    if 200 <= status < 300:
        return Outcome.ACK
    if status == 410:
        return Outcome.GONE
    return Outcome.ERROR_ANSWER


def retry_after_seconds(status: int | None, header: str | None) -> float | None:
    """The wait a ``429`` or ``503`` answer asks for in ``Retry-After`` (seconds form)."""
    if status not in (429, 503) or not header:
        return None
    try:
        value = float(header.strip())
    except ValueError:
        return None
    return value if value >= 0 else None


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float = 0.5
    maximum_s: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5
    """The delay is drawn from ``[base * (1 - jitter), base]``."""

    def delay(self, attempt: int, rand: float, retry_after: float | None = None) -> float:
        """The wait before try ``attempt + 1`` after ``attempt`` failed tries (``attempt >= 1``).

        ``rand`` is a uniform number in [0, 1). A ``Retry-After`` the endpoint asked for
        is honoured as given (up to an hour, against a broken header).
        """
        if retry_after is not None:
            return min(retry_after, 3600.0)
        base = min(self.maximum_s, self.initial_s * self.multiplier ** max(0, attempt - 1))
        return base * (1 - self.jitter * rand)
