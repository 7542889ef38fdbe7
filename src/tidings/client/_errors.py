"""Exceptions of the SDK, under :class:`tidings.errors.TidingsError`.

::

    ClientError              any failure talking to the service
    ├── ApiResponseError     the service refused the call: ``status`` and stable ``code``
    ├── ItemError            one item of a batch came back ``Err``: ``code`` and ``detail``
    └── TransportError       no answer: connection refused, reset, timed out
        └── PublishUncertain a publish retried until its deadline: the events may have been
                             stored; publishing them again with the same keys is safe
"""

from __future__ import annotations

from typing import Any

from ..errors import TidingsError

__all__ = ["ApiResponseError", "ClientError", "ItemError", "PublishUncertain", "TransportError"]


class ClientError(TidingsError):
    pass


class ApiResponseError(ClientError):
    def __init__(self, status: int, code: str, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        """The answer's ``Retry-After``, in seconds, when it had one."""


class ItemError(ClientError):
    def __init__(self, code: str, detail: Any) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class TransportError(ClientError):
    pass


class PublishUncertain(TransportError):
    """A publish whose outcome stayed unknown until its deadline. ``events`` are the events
    not settled, each with the idempotency key it was sent with: publishing them again
    (``Publisher.publish_batch(e.events)``) within the publication's deduplication window
    stores each at most once."""

    def __init__(self, message: str, events: list[Any]) -> None:
        super().__init__(message)
        self.events = events
