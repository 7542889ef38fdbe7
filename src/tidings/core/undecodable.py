"""What decoding bytes from outside may raise.

msgspec raises its ``DecodeError`` for bytes that are not JSON (or msgpack) and its
``ValidationError``, a ``DecodeError`` too, for a document of the wrong shape. Nesting
deeper than its decoder goes (about 1,000 levels, some 2 KB of brackets) raises
``RecursionError`` instead, which is no ``DecodeError``: a decode that catches only
msgspec's errors lets a short hostile document through as an unexpected exception (a
500, a dropped connection, a consumer that stops). Every decode of input from the
network catches :data:`UNDECODABLE`.
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = ["UNDECODABLE"]

UNDECODABLE: Final = (msgspec.DecodeError, RecursionError)
