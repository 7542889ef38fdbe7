"""Store addresses shown without their secrets: the one rule the server's messages and
the pipeline's both print by. Pure: no I/O."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

__all__ = ["redact_address"]


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
