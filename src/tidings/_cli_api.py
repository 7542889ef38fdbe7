"""What the API commands share: one line per error, with the API's code and what to do."""

from __future__ import annotations

import sys

from .client import ApiResponseError, ClientError, ItemError, TransportError
from .errors import TidingsError

__all__ = ["HINTS", "explain", "fail", "say", "status_of"]

HINTS: dict[str, str] = {
    "namespace_not_found": "register it first: the API's icrc72_register_publication, or 'tidings ls publications'",
    "PublicationNotFound": "register it first: the API's icrc72_register_publication, or 'tidings ls publications'",
    "NotFound": "'tidings ls publications' / 'tidings ls subscriptions' show what there is",
    "unauthenticated": "the token is unknown or revoked: check --token / TIDINGS_TOKEN / the profile",
    "forbidden": "this principal may not do that: ask an admin (docs/rights.md)",
    "Unauthorized": "this principal may not do that here: ask the publication's controller or an admin "
                    "(docs/rights.md)",
    "UnauthorizedPublisher": "the publication's allow/deny lists refuse this principal: ask its controller",
    "UnauthorizedSubscriber": "the publication's allow/deny lists refuse this principal: ask its controller",
    "too_many_connections": "this principal holds too many stream connections: end some "
                            "(TIDINGS_STREAM_MAX_CONNECTIONS_PER_PRINCIPAL)",
    "invalid_value": "the data is not a valid ICRC-16 value (docs/wire-format.md)",
    "ImproperConfig": "see docs/semantics.md for the configuration keys",
    "payload_too_large": "send smaller events or fewer per call",
}


def explain(e: BaseException) -> str:
    """One line: the code, the service's words, and what to do."""
    if isinstance(e, ApiResponseError):
        hint = HINTS.get(e.code, "")
        return f"{e.code}: {e.message}" + (f" ({hint})" if hint else "")
    if isinstance(e, ItemError):
        hint = HINTS.get(e.code, "")
        return f"{e.code}: {e.detail}" + (f" ({hint})" if hint else "")
    if isinstance(e, TransportError):
        return f"unreachable: {e} (is the server running? check --url / TIDINGS_URL / the profile)"
    if isinstance(e, ClientError | TidingsError):
        code = getattr(e, "code", type(e).__name__)
        return f"{code}: {e}"
    return f"{type(e).__name__}: {e}"


def say(line: str) -> None:
    print(line.replace("\n", " ").replace("\r", " "), file=sys.stderr, flush=True)


def fail(e: BaseException, prefix: str = "tidings") -> int:
    """Print ``e`` as one line; the exit status: 2 for usage and connection, else 1."""
    say(f"{prefix}: {explain(e)}")
    return status_of(e)


def status_of(e: BaseException) -> int:
    """2 for usage, configuration, the token and the connection; 1 for a refusal."""
    if isinstance(e, ApiResponseError):
        return 2 if e.status == 401 else 1
    if isinstance(e, ItemError):
        return 1
    return 2
