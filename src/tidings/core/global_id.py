"""The global id of an interchain event: the one rule, and its parts.

Every place that needs an event's cross-network identity derives it here: the live
distributor (direct publication and every network's deliveries), the listing of
``GET /api/v1/events``, and the reconciler for the networks it collects in Python. The
reconciler's Spark side builds the same rule as a ``Column``
(:func:`tidings.pipeline.global_id.global_id_column`) from the constants below, so the
two cannot drift; ``tests/test_global_id_spark.py`` holds them equal over generated
strings.

The rule (docs/interchain.md, "Global id"), applied to ``dataLocation``:

1. drop everything from the first ``#`` (the fragment);
2. the query is what follows the first ``?`` (none: no global id);
3. split the query on every ``&`` into parameters, and each parameter at its first ``=``
   into name and value (no ``=``: the value is empty);
4. the parameter is the *first* one whose name, percent-decoded, is ``hl`` and whose
   value is not empty;
5. its value, percent-decoded, is the global id. Percent-decoding is form decoding:
   ``+`` is a space, ``%XX`` the byte XX, a ``%`` not followed by two hex digits stands
   for itself, every other character for its UTF-8 bytes; the bytes must then be UTF-8.

No such parameter: ``missing_global_id``. A value whose bytes are not UTF-8 (``%C3``
alone, an encoded surrogate): ``invalid_global_id``; Python and the JVM replace
malformed UTF-8 differently, so such an id could never be the same on both sides, and it
is refused rather than guessed.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "ESCAPE_PATTERN",
    "FRAGMENT",
    "GLOBAL_ID_PARAM",
    "LONE_PERCENT",
    "NAME_SEPARATOR",
    "PARAM_SEPARATOR",
    "PLUS",
    "QUERY",
    "REPLACEMENT",
    "REPLACEMENT_ESCAPE",
    "GlobalIdError",
    "escape_global_id",
    "global_id",
    "percent_decode",
]

GLOBAL_ID_PARAM: Final = "hl"
"""The query parameter of ``dataLocation`` that names the event (the spec's ``?hl=<value>``)."""
FRAGMENT: Final = "#"
QUERY: Final = "?"
PARAM_SEPARATOR: Final = "&"
NAME_SEPARATOR: Final = "="
PLUS: Final = "+"
"""Decodes to a space (form decoding, as ``java.net.URLDecoder`` and ``urllib.parse.unquote_plus``)."""
ESCAPE_PATTERN: Final = "%([0-9A-Fa-f]{2})"
"""One escaped byte. A regular expression that reads the same in Python and in Java."""
LONE_PERCENT: Final = "%(?![0-9A-Fa-f]{2})"
"""A ``%`` that starts no escape: it stands for itself (same in Python and Java)."""
REPLACEMENT: Final = "\ufffd"
"""What a decoder puts for malformed UTF-8; a decoded id may hold it only where the
input spelled it (the character itself or :data:`REPLACEMENT_ESCAPE`)."""
REPLACEMENT_ESCAPE: Final = "(?i)%EF%BF%BD"
"""U+FFFD percent-encoded (Python and Java regular expression)."""

_ESCAPE = re.compile(ESCAPE_PATTERN.encode())
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


class GlobalIdError(ValueError):
    """``dataLocation`` gives no global id; ``code`` is ``missing_global_id`` or ``invalid_global_id``."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


def percent_decode(text: str, *, strict: bool = True) -> str:
    """Form-decode ``text`` (the rule's step 5). ``strict``: bytes that are not UTF-8 raise
    ``UnicodeDecodeError``; otherwise each malformed part becomes U+FFFD."""
    raw = text.replace(PLUS, " ").encode("utf-8", "surrogatepass")
    decoded = _ESCAPE.sub(lambda m: bytes.fromhex(m.group(1).decode()), raw)
    return decoded.decode("utf-8", "strict" if strict else "replace")


def _hl_value(data_location: str) -> str | None:
    """Steps 1-4: the raw (still encoded) value of the first non-empty ``hl``."""
    _, sep, query = data_location.split(FRAGMENT, 1)[0].partition(QUERY)
    if not sep:
        return None
    for part in query.split(PARAM_SEPARATOR):
        name, _, value = part.partition(NAME_SEPARATOR)
        if value and percent_decode(name, strict=False) == GLOBAL_ID_PARAM:
            return value
    return None


def global_id(data_location: str) -> str:
    """The global id of an event whose ``dataLocation`` is ``data_location`` (see the module docstring)."""
    value = _hl_value(data_location)
    if value is None:
        raise GlobalIdError(f"dataLocation has no {GLOBAL_ID_PARAM} parameter: {data_location[:200]!r}",
                            code="missing_global_id")
    try:
        return percent_decode(value)
    except UnicodeError:
        raise GlobalIdError(f"the {GLOBAL_ID_PARAM} parameter of dataLocation is not UTF-8 text once decoded: "
                            f"{value[:200]!r}", code="invalid_global_id") from None


def escape_global_id(gid: str) -> str:
    """``gid`` as printable ASCII that no adapter misreads (a NATS header, a Redis key, a
    URL query): every UTF-8 byte outside ``A-Z a-z 0-9 - . _ ~`` percent-encoded. One to
    one, and the inverse of the rule's decoding: ``global_id("...?hl=" + escape_global_id(g)) == g``."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in gid.encode("utf-8", "surrogatepass"))
