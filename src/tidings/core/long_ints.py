"""How long an integer tidings reads: at most :data:`MAX_INT_DIGITS` decimal digits.

ICRC-16's ``Nat`` and ``Int`` are unbounded, and so is JSON's integer. Python bounds the
conversion of digit strings (4,300 digits by default, since it takes time quadratic in
the length), and msgspec, which decodes every body, refuses a longer integer with the
same ``ValidationError`` it raises for a wrong shape; without a look of its own a face
called that well-formed JSON malformed. This module states the bound once: every face
refuses an integer past it as ``out_of_range``, naming the bound and where the integer is
(:func:`long_integer` finds it in the text), and :func:`tidings.core.values.check` holds
decoded values to it, whatever the process's own limit.
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = ["INT_LIMIT", "MAX_INT_DIGITS", "NEGATIVE_LIMIT", "long_integer", "long_message"]

MAX_INT_DIGITS: Final = 4300
"""Most characters of an integer read anywhere: Python's default
``sys.get_int_max_str_digits()``, which msgspec's decoding obeys counting the sign too.
So 4,300 digits, and 4,299 for a negative integer."""
INT_LIMIT: Final = 10**MAX_INT_DIGITS
"""Every integer read is below this..."""
NEGATIVE_LIMIT: Final = -(10 ** (MAX_INT_DIGITS - 1))
"""... and above this."""

_DIGITS: Final = frozenset(b"0123456789")
_SPACE: Final = frozenset(b" \t\r\n")


def long_message(where: str, digits: int) -> str:
    """What a refusal of an integer of ``digits`` digits at ``where`` says."""
    return (f"the integer at {where} has {digits:,} digits: tidings reads integers of at most "
            f"{MAX_INT_DIGITS:,} digits ({MAX_INT_DIGITS - 1:,} when negative), ICRC-16 Nat and Int values included")


_DECODER_SAYS: Final = "Integer value out of range"
"""How msgspec's ``ValidationError`` reads when an integer is past the conversion limit."""


def long_integer(text: bytes | str, error: BaseException | None = None) -> tuple[str, int] | None:
    """The JSON path (``$[0].data.Nat``) and digit count of the first integer in the JSON
    ``text`` with more than :data:`MAX_INT_DIGITS` characters, or None.

    A scan, without recursion and in one pass: it is asked only after a decode failed,
    so it expects well-formed JSON and answers None for anything it cannot follow. Given
    the decode's ``error``, it scans only when that error is msgspec's for such an
    integer: the scan costs Python time per token (about 0.14 s for a 1 MiB body), which
    a wrong shape, the common failure, need not pay."""
    if error is not None and _DECODER_SAYS not in str(error):
        return None
    raw = text.encode() if isinstance(text, str) else bytes(text)
    frames: list[_Frame] = []  # the open containers, outermost first
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == 0x22:  # a string: find its end, past escaped quotes
            j = i + 1
            while True:
                j = raw.find(b'"', j)
                if j < 0:
                    return None
                k = j - 1
                while raw[k] == 0x5C:
                    k -= 1
                if (j - 1 - k) % 2 == 0:
                    break
                j += 1
            if frames and frames[-1].key_next:
                try:
                    frames[-1].at = msgspec.json.decode(raw[i:j + 1])
                except msgspec.DecodeError:
                    return None
            i = j + 1
        elif c in b"[{":
            frames.append(_Frame(c == 0x7B))
            i += 1
        elif c in b"]}":
            if frames:
                frames.pop()
            i += 1
        elif c == 0x3A:  # ':'
            if frames:
                frames[-1].key_next = False
            i += 1
        elif c == 0x2C:  # ','
            if frames:
                top = frames[-1]
                if top.is_object:
                    top.key_next = True
                elif isinstance(top.at, int):
                    top.at += 1
            i += 1
        elif c == 0x2D or c in _DIGITS:
            j = i + 1 if c == 0x2D else i
            start = j
            while j < n and raw[j] in _DIGITS:
                j += 1
            digits = j - start
            is_integer = j >= n or raw[j] not in b".eE"
            while j < n and raw[j] not in _SPACE and raw[j] not in b",]}":
                j += 1  # a fraction or an exponent: a float, read as a double
            if is_integer and j - i > MAX_INT_DIGITS:  # the sign counts, as in msgspec
                return _path(frames), digits
            i = j
        else:
            i += 1
    return None


class _Frame:
    """An open array (``at``: the index of the item being read) or object (``at``: the
    key of the member being read; ``key_next``: the next string is a key)."""

    __slots__ = ("at", "is_object", "key_next")

    def __init__(self, is_object: bool) -> None:
        self.is_object = is_object
        self.at: int | str = "" if is_object else 0
        self.key_next = is_object


def _path(frames: list[_Frame]) -> str:
    out = ["$"]
    for f in frames:
        if not f.is_object:
            out.append(f"[{f.at}]")
        elif isinstance(f.at, str) and f.at.isidentifier():
            out.append(f".{f.at}")
        else:
            out.append(f"[{msgspec.json.encode(str(f.at)).decode()}]")
    return "".join(out)
