"""The errors of the interchain distributor, under :class:`tidings.errors.TidingsError`.

::

    TidingsError
    ├── ConfigError                 the distributor's config file is missing or invalid
    └── InterchainError             base of what follows; carries a stable ``code``
        └── NetworkUnavailable      a network did not answer or refused (``network_unavailable``)
"""

from __future__ import annotations

from ..errors import TidingsError

__all__ = ["InterchainError", "NetworkUnavailable"]


class InterchainError(TidingsError):
    default_code = "interchain"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code


class NetworkUnavailable(InterchainError):
    """A network could not be reached or refused the operation; it is tried again later."""

    default_code = "network_unavailable"
