"""One HTTP method: its name, argument and result types, and handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import BadRequest
from ..store import PrincipalRecord

if TYPE_CHECKING:
    from ..broker import Broker

__all__ = ["Handler", "Method", "Reply"]

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
    decoder: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "decoder", msgspec.json.Decoder(self.arg))

    def decode(self, body: bytes) -> Any:
        if not body.strip():
            if self.empty_arg is msgspec.UNSET:
                raise BadRequest(f"{self.name} needs a JSON body", code="invalid_argument")
            return self.empty_arg
        return self.decoder.decode(body)



@dataclass(frozen=True, slots=True)
class Reply:
    """A handler's result with extra response headers."""

    body: Any
    headers: dict[str, str]
