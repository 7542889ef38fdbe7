"""The idempotency keys tidings' own publishers make: UUIDs of version 7 (RFC 9562).

A key's first 48 bits are the Unix time in milliseconds and the other 74 (version and
variant aside) random. Keys made close in time sort close together, so the stores' key
indexes (B-trees ordered by the key) take each commit's keys on a few leaf pages, as
they take its events: random (version 4) keys touch a page each, which cost a keyed
publish about three times as much store work (BENCHMARKS.md, "Idempotency keys").
Uniqueness rests on the random bits alone: a clock that steps back makes no repeat.
"""

from __future__ import annotations

from typing import Final

__all__ = ["RANDOM_BYTES", "uuid7"]

RANDOM_BYTES: Final = 10
"""How many random bytes :func:`uuid7` takes (74 of their 80 bits are used)."""
_MS_MASK: Final = (1 << 48) - 1


def uuid7(unix_ms: int, rand: bytes) -> str:
    """The version 7 UUID of ``unix_ms`` (taken modulo 2**48) and ``rand``, as text."""
    if len(rand) != RANDOM_BYTES:
        raise ValueError(f"uuid7 takes {RANDOM_BYTES} random bytes, not {len(rand)}")
    r = int.from_bytes(rand, "big")
    rand_a, rand_b = r >> 68, r & ((1 << 62) - 1)  # 12 and 62 bits
    h = f"{(unix_ms & _MS_MASK) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"  # as str(uuid.UUID(...)), a third of its time
