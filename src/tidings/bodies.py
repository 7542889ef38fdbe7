"""Reading a request body within a size limit: one rule for the API and the front processes."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from .errors import PayloadTooLarge

__all__ = ["declared_length", "read_body"]


def declared_length(request: Request) -> int:
    """The body's length as its ``Content-Length`` declares it (0: none, or not a number)."""
    declared = request.headers.get("content-length")
    return int(declared) if declared is not None and declared.isdigit() and len(declared) < 19 else 0


async def read_body(request: Request, limit: int, on_size: Callable[[int], None] | None = None) -> bytes:
    """The whole body, or ``PayloadTooLarge`` as soon as it is known to exceed ``limit``
    (from its declared length, or while it arrives). ``on_size`` hears the bytes read so
    far after each chunk and may refuse the rest by raising (what waits is capped in bytes:
    ``core.admission``)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is {declared} bytes; the limit is {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if on_size is not None:
            on_size(size)
    return b"".join(chunks)
