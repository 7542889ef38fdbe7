"""Crockford Base32 for event and notification ids (natural numbers of any size).

Encoding uses the alphabet ``0123456789ABCDEFGHJKMNPQRSTVWXYZ`` without padding or
check symbol. Decoding is case-insensitive, reads ``I``/``L`` as 1 and ``O`` as 0, and
ignores hyphens, as Crockford's specification asks.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ALPHABET", "InvalidId", "decode", "encode", "parse_id"]

ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE: Final[dict[str, int]] = {c: i for i, c in enumerate(ALPHABET)}
_DECODE.update({c.lower(): i for c, i in list(_DECODE.items())})
_DECODE.update({"I": 1, "i": 1, "L": 1, "l": 1, "O": 0, "o": 0})


class InvalidId(ValueError):
    """Text that is not a Crockford Base32 number, or a number that is not a Nat."""


def encode(n: int) -> str:
    """Crockford Base32 text of a natural number (``0`` encodes as ``"0"``)."""
    if type(n) is not int or n < 0:
        raise InvalidId(f"ids are natural numbers, got {n!r}")
    if n == 0:
        return "0"
    out = []
    while n:
        n, r = divmod(n, 32)
        out.append(ALPHABET[r])
    return "".join(reversed(out))


def decode(text: str) -> int:
    """The natural number a Crockford Base32 text stands for."""
    digits = text.replace("-", "")
    if not digits:
        raise InvalidId("an id needs at least one Crockford Base32 digit")
    n = 0
    for c in digits:
        d = _DECODE.get(c)
        if d is None:
            raise InvalidId(f"{c!r} is not a Crockford Base32 digit in {text!r}")
        n = n * 32 + d
    return n


def parse_id(x: object) -> int:
    """An id given either as a Nat (JSON integer) or as Crockford Base32 text."""
    if type(x) is int:
        if x < 0:
            raise InvalidId(f"ids are natural numbers, got {x}")
        return x
    if isinstance(x, str):
        return decode(x)
    raise InvalidId(f"an id is a natural number or Crockford Base32 text, got {type(x).__name__}")
