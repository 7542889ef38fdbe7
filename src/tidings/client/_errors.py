"""Exceptions of the SDK, under :class:`tidings.errors.TidingsError`.

::

    ClientError              any failure talking to the service
    ├── ApiResponseError     the service refused the call: ``status`` and stable ``code``
    ├── ItemError            one item of a batch came back ``Err``: ``code`` and ``detail``
    └── TransportError       no answer: connection refused, reset, timed out
"""

from __future__ import annotations

from typing import Any

from ..errors import TidingsError

__all__ = ["ApiResponseError", "ClientError", "ItemError", "TransportError"]


class ClientError(TidingsError):
    pass


class ApiResponseError(ClientError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class ItemError(ClientError):
    def __init__(self, code: str, detail: Any) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class TransportError(ClientError):
    pass
