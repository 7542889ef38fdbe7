"""The errors of the interchain distributor, under :class:`tidings.errors.TidingsError`.

::

    TidingsError
    ├── ConfigError                 the distributor's config file is missing or invalid
    └── InterchainError             base of what follows; carries a stable ``code``
        └── NetworkUnavailable      a network did not answer or refused (``network_unavailable``)
            └── NotStored           a network acknowledged a publish but does not hold it (``not_stored``)
"""

from __future__ import annotations

from ..errors import TidingsError

__all__ = ["InterchainError", "NetworkUnavailable", "NotStored"]


class InterchainError(TidingsError):
    default_code = "interchain"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code


class NetworkUnavailable(InterchainError):
    """A network could not be reached or refused the operation; it is tried again later."""

    default_code = "network_unavailable"


class NotStored(NetworkUnavailable):
    """A network acknowledged a publish without storing it (a deduplication window that
    remembers an id whose message is gone, a full stream that discards): the event does
    not count as published there."""

    default_code = "not_stored"
