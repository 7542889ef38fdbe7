"""The exceptions tidings raises, one tree for the whole package.

::

    TidingsError
    ├── ApiError                 an HTTP request is refused; carries ``code`` and ``status``
    │   ├── BadRequest           400  malformed_json, invalid_argument, invalid_value
    │   ├── Unauthenticated      401  unauthenticated
    │   ├── Forbidden            403  forbidden
    │   ├── NotFound             404  unknown_method, namespace_not_found, not_found
    │   ├── PayloadTooLarge      413  payload_too_large
    │   └── Unavailable          503  unavailable
    ├── StoreError               the store failed (I/O, corruption); the request is not applied
    │   ├── StoreUnavailable     the store cannot be reached now (restarting, failing over, cut off): retry
    │   ├── LeaseLost            a write under a lease this process no longer holds was refused (fencing)
    │   ├── LimitReached         a creation would take a principal past its limit; nothing written
    │   └── BackupError          a backup or restore could not be made; the store is as it was
    └── ConfigError              a setting is missing or invalid

The ``code`` strings are stable and are what clients and tests should look at; the
messages are for people and may change. ``tidings.client`` raises its own subclasses
(see ``tidings.client.ClientError``) carrying the same codes.
"""

from __future__ import annotations

__all__ = [
    "ApiError",
    "BackupError",
    "BadRequest",
    "ConfigError",
    "Forbidden",
    "KeyTaken",
    "LeaseLost",
    "LimitReached",
    "NotFound",
    "PayloadTooLarge",
    "StoreError",
    "StoreUnavailable",
    "TidingsError",
    "Unauthenticated",
    "Unavailable",
]


class TidingsError(Exception):
    """Root of every exception tidings raises on purpose."""


class ApiError(TidingsError):
    status: int = 500
    default_code: str = "internal"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code


class BadRequest(ApiError):
    status = 400
    default_code = "invalid_argument"


class Unauthenticated(ApiError):
    status = 401
    default_code = "unauthenticated"


class Forbidden(ApiError):
    status = 403
    default_code = "forbidden"


class NotFound(ApiError):
    status = 404
    default_code = "not_found"


class PayloadTooLarge(ApiError):
    status = 413
    default_code = "payload_too_large"


class Unavailable(ApiError):
    status = 503
    default_code = "unavailable"

    def __init__(self, message: str, *, code: str | None = None, retry_after_s: int = 1) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s
        """Sent as ``Retry-After``: when trying again makes sense."""


class StoreError(TidingsError):
    """The store could not complete an operation; nothing of it was applied."""


class StoreUnavailable(StoreError):
    """The store cannot be reached now (it restarts, fails over, or the network to it is
    cut): nothing was applied, or, for a write whose connection broke after it was sent,
    whether it was is unknown. Worth retrying after a moment (HTTP 503, Retry-After)."""

    retry_after_s = 1


class KeyTaken(StoreError):
    """An append carried an idempotency key that a live row holds already (a concurrent
    publish of the same key won): nothing of the append was applied. The publish path
    looks the keys up again and answers the repeats."""


class KeysFull(StoreError):
    """The store holds as many live idempotency keys as it may keep track of: nothing of
    the append was applied. Keys free up as their windows pass; retry shortly."""


class LeaseLost(StoreError):
    """A write for leased work was refused: the lease it was made under has been taken by
    another broadcaster (its epoch moved on). Whoever made it must stop that work."""


class LimitReached(StoreError):
    """A creation asked to stay within a per-principal limit found the principal at it:
    nothing was written. The store counts and inserts in one atomic step, so creations
    made at once (through one broadcaster or several) never take a principal past it."""

    def __init__(self, message: str, *, limit: int, everyone: bool = False) -> None:
        super().__init__(message)
        self.limit = limit
        self.everyone = everyone
        """The limit is on all principals' rows together (``create_replay``'s ``total``)."""


class BackupError(StoreError):
    """A backup or restore could not be made (a path refused, a full disk, a damaged copy);
    the store, and the destination, are as they were before it started."""


class ConfigError(TidingsError):
    """A setting is missing or has an invalid value."""
