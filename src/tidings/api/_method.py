"""One HTTP method: its name, argument and result types, and handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from ..core.int64 import out_of_range, range_message
from ..errors import BadRequest
from ..store import PrincipalRecord

if TYPE_CHECKING:
    from ..broker import Broker

__all__ = ["Handler", "Method", "Reply", "warning_header"]

Handler = Callable[["Broker", PrincipalRecord, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    arg: Any
    result: Any
    handler: Handler
    summary: str
    empty_arg: Any = msgspec.UNSET
    """What an empty body means; UNSET if a body is required."""
    bounded_ints: bool = True
    """Refuse integers outside the signed 64 bits the store keeps, wherever the argument
    has one outside an ICRC-16 value (those are unbounded). False only where the handler
    stores no integer of the request (publish: a hot path)."""
    decoder: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "decoder", msgspec.json.Decoder(self.arg))

    def decode(self, body: bytes) -> Any:
        if not body.strip():
            if self.empty_arg is msgspec.UNSET:
                raise BadRequest(f"{self.name} needs a JSON body", code="invalid_argument")
            return self.empty_arg
        arg = self.decoder.decode(body)
        if self.bounded_ints:
            where = out_of_range(arg)
            if where is not None:
                raise BadRequest(f"{self.name}: {range_message(where)}", code="out_of_range")
        return arg


@dataclass(frozen=True, slots=True)
class Reply:
    """A handler's result with extra response headers."""

    body: Any
    headers: dict[str, str]


def warning_header(warnings: list[str]) -> dict[str, str]:
    """RFC 9111's ``Warning`` header, code 299 ("miscellaneous persistent warning")."""
    quoted = ", ".join('299 tidings "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"' for w in warnings)
    return {"Warning": quoted}
