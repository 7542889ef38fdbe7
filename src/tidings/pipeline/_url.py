"""PostgreSQL addresses as the pipeline takes them: recognised, made fit for libpq, shown without secrets.

The pipeline takes the same address as ``tidings serve --store`` (an asyncpg address:
``postgresql://user:password@host:port/database?search_path=tidings``). The ADBC driver
hands it to libpq, which refuses query parameters it does not know, where asyncpg passes
them to the server as settings; :func:`libpq_uri` moves those into libpq's ``options``
(``-c search_path=tidings``), so both read the same tables. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from ..core.addresses import redact_address

__all__ = ["SCHEMES", "is_pg_url", "libpq_uri", "redact", "scrub"]

SCHEMES: Final = ("postgresql", "postgres")
CONNECT_TIMEOUT_S: Final = "10"
"""libpq waits for ever on an address that drops packets; a job should fail instead."""

# libpq's connection keywords (PostgreSQL 16 docs, 34.1.2); any other query parameter is
# a server setting, as asyncpg treats it.
_LIBPQ: Final = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth", "channel_binding",
    "connect_timeout", "client_encoding", "options", "application_name", "fallback_application_name",
    "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
    "replication", "gssencmode", "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword",
    "sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version",
    "ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service", "target_session_attrs",
    "load_balance_hosts",
})


def is_pg_url(location: str | Path) -> bool:
    """Whether ``location`` is a ``postgresql://`` or ``postgres://`` address (a ``Path`` never is:
    it would have folded the ``//``)."""
    if not isinstance(location, str):
        return False
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def libpq_uri(url: str, settings: Mapping[str, str] | None = None, *,
              connect_timeout_s: float | None = None) -> str:
    """``url`` as libpq takes it: unknown query parameters, then ``settings``, become
    ``-c name=value`` server settings in ``options``; a connect timeout
    (``connect_timeout_s``, else 10 s) and an application name unless given."""
    parts = urlsplit(url)
    pairs = [*parse_qsl(parts.query, keep_blank_values=True), *(settings or {}).items()]
    keep = [(k, v) for k, v in pairs if k in _LIBPQ]
    settings_sql = [f"-c {k}={_option_escape(v)}" for k, v in pairs if k not in _LIBPQ]
    if settings_sql:
        given = [v for k, v in keep if k == "options"]
        keep = [(k, v) for k, v in keep if k != "options"]
        keep.append(("options", " ".join([*given, *settings_sql])))
    names = {k for k, _ in keep}
    if "connect_timeout" not in names:
        # libpq takes whole seconds, 2 at least.
        wait = CONNECT_TIMEOUT_S if connect_timeout_s is None else str(max(2, math.ceil(connect_timeout_s)))
        keep.append(("connect_timeout", wait))
    if "application_name" not in names:
        keep.append(("application_name", "tidings-pipeline"))
    return urlunsplit(parts._replace(query=urlencode(keep, quote_via=quote)))


def _option_escape(value: str) -> str:
    # libpq splits ``options`` at spaces; a backslash keeps one (or itself) in a value.
    return value.replace("\\", "\\\\").replace(" ", "\\ ")


def redact(location: str | Path) -> str:
    """``location`` fit to print (:func:`tidings.core.addresses.redact_address`)."""
    return redact_address(str(location))


def scrub(text: str, location: str | Path) -> str:
    """``text`` (a driver's message) with the password of ``location`` and the address
    itself replaced by their printable forms, whatever the driver chose to echo."""
    loc = str(location)
    if not is_pg_url(loc):
        return text
    text = text.replace(loc, redact(loc))
    for secret in _secrets(loc):
        text = text.replace(secret, "***")
    return text


def _secrets(url: str) -> list[str]:
    parts = urlsplit(url)
    out = [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k == "password" and v]
    auth = parts.netloc.rpartition("@")[0]
    if ":" in auth:
        raw = auth.split(":", 1)[1]
        out += [s for s in {raw, unquote(raw)} if s]
    return out
