"""Store addresses shown without their secrets: the one rule the server's messages and
the pipeline's both print by; and the one connect timeout every outbound connection of
the CLI and the service waits by, with the message a failed connection ends with. Pure:
no I/O (the environment is passed in)."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

__all__ = ["CONNECT_TIMEOUT_ENV", "DEFAULT_CONNECT_TIMEOUT_S", "connect_timeout_s", "redact_address",
           "unreachable"]

CONNECT_TIMEOUT_ENV = "TIDINGS_CONNECT_TIMEOUT_S"
"""The setting of every connect timeout: PostgreSQL, Redis, NATS, Spark Connect, the
XMPP server, webhook endpoints (docs/operations.md)."""
DEFAULT_CONNECT_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_BOUNDS = (0.1, 600.0)


def connect_timeout_s(env: Mapping[str, str]) -> float:
    """The connect timeout ``env`` sets (:data:`CONNECT_TIMEOUT_ENV`), or the default.
    Raises ``ValueError`` naming the setting when it is not a number in bounds."""
    raw = env.get(CONNECT_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_CONNECT_TIMEOUT_S
    low, high = CONNECT_TIMEOUT_BOUNDS
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # NaN fails too
        raise ValueError(f"{CONNECT_TIMEOUT_ENV}={raw!r} is not a number of seconds in [{low:g}, {high:g}]")
    return value


def unreachable(what: str, address: str, timeout_s: float, reason: str) -> str:
    """The message a failed connection ends with: what and where (without a password),
    why, and the setting that changes how long it is waited for. ``reason`` (a driver's
    words) has the address's password taken out, should the driver have echoed it."""
    shown = redact_address(address)
    password = _password(address)
    if password:
        reason = reason.replace(password, "***")
    return (f"cannot connect to {what} at {shown}: {reason.strip() or 'no answer'} "
            f"(connect timeout {timeout_s:g} s; {CONNECT_TIMEOUT_ENV} changes it)")


def _password(address: str) -> str:
    if "://" not in address:
        return ""
    try:
        parts = urlsplit(address)
        found = parts.password or ""
    except ValueError:
        return ""
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if k == "password" and v:
            found = v
    return found


def redact_address(location: str) -> str:
    """``location`` fit to print: a URL without its password, whether in the authority
    (``user:password@``, dropped) or as a parameter naming a password or a secret
    (``password``, libpq's ``sslpassword``: ``***``); anything that
    is not a URL, or holds no password, exactly as it is."""
    text = str(location)
    if "://" not in text:
        return text
    parts = urlsplit(text)
    netloc, query = parts.netloc, parts.query
    auth, at, host = netloc.rpartition("@")
    if at and ":" in auth:
        netloc = f"{auth.split(':', 1)[0]}@{host}"
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(_secret_key(k) for k, _ in pairs):
        query = urlencode([(k, "***" if _secret_key(k) else v) for k, v in pairs], quote_via=quote, safe="*")
    if (netloc, query) == (parts.netloc, parts.query):
        return text
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _secret_key(key: str) -> bool:
    return "password" in key.lower() or "secret" in key.lower()
