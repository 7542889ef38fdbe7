"""What delivery speaks in, below every module of it: a notification on its way (``Note``),
the answer to a push (``Pushed``), how delivery ends a subscription (``Gone``), and the
routes the router hands the hub (``RoutedTo``).

The hub, the worker and its halves, the push and replays all use these; keeping them here,
under everything, is what lets none of those modules import another one back.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.retry import Outcome
from ...store import Route, StoredEvent

__all__ = [
    "ENDPOINT_GONE", "NOT_SENT", "SUBSCRIPTION_ENDED", "Gone", "Note", "Pushed", "RoutedTo",
    "failed_items", "taken_whole",
]

Pushed = tuple[Outcome, object, str, float | None]
"""A push's outcome, its decoded answer, a reason for logs, a Retry-After (``Delivery.post``)."""


class Note:
    """A notification on its way: its event, tries so far, and when it was recorded."""

    __slots__ = ("attempts", "created_at", "event", "id")

    def __init__(self, nid: int, event: StoredEvent, attempts: int = 0, created_at: int = 0) -> None:
        self.id = nid
        self.event = event
        self.attempts = attempts
        self.created_at = created_at


ENDPOINT_GONE = "endpoint_gone"
SUBSCRIPTION_ENDED = "subscription_ended"
NOT_SENT = "too_late"
"""The reason of a push that sent nothing: the lease's sure end passed before its first
byte could leave (``Outbound``'s ``until``). Not a try: the batch waits for the lease."""


class Gone(Exception):
    """Delivery ends the subscription: ``410 Gone`` (``endpoint_gone``), or an error answer
    when not reliable (``subscription_ended``). ``code`` is the dead-letter reason of its
    pending notifications."""

    def __init__(self, code: str, detail: str, attempts: dict[int, int] | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.attempts = attempts or {}
        """Pushes made of the notifications in flight, the one that ended it included."""


def failed_items(answer: object, n: int) -> set[int]:
    """Indexes the subscriber answered ``Err`` for; a non-itemized 2xx confirms all."""
    if not isinstance(answer, list) or len(answer) != n:
        return set()
    return {i for i, item in enumerate(answer) if isinstance(item, dict) and "Err" in item}


def taken_whole(pushed: Pushed | None, n: int) -> bool:
    """Whether a push of ``n`` notifications (None: not made) confirmed all of them: what
    lets a batch pushed before being recorded be recorded as delivered at once."""
    return pushed is not None and pushed[0] is Outcome.ACK and not failed_items(pushed[1], n)


@dataclass(slots=True, kw_only=True)
class RoutedTo(Route):
    """A route, and the worker generation it was planned for (``Worker.generation``)."""

    generation: int
    after: int = 0
    """The namespace's last seq before these events: a worker takes a route that records
    nothing only if it has considered everything up to here (``Delivery.routed``)."""
