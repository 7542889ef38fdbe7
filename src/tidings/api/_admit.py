"""A publish's body read only once it is admitted under the waiting caps (``Overload``)."""

from __future__ import annotations

import functools

from starlette.requests import Request

from ..bodies import declared_length, read_body
from ..broker.publish import Overload, Ticket

__all__ = ["admitted_body", "declared_length"]


async def admitted_body(request: Request, limit: int, overload: Overload, ticket: Ticket) -> bytes:
    """The body of a publish admitted with ``ticket`` (``overload.admit`` of its declared
    length, taken before anything else of the request waits): ``Overloaded`` (503,
    ``Retry-After``) as soon as what arrives no longer fits. The caller gives the ticket
    back with ``overload.release`` once the publish is answered, whatever happened."""
    return await read_body(request, limit, functools.partial(overload.grow, ticket))
