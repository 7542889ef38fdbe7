"""Reading a request body within a size limit: one rule for the API and the front processes."""

from __future__ import annotations

from starlette.requests import Request

from .errors import PayloadTooLarge

__all__ = ["read_body"]


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or ``PayloadTooLarge`` as soon as it is known to exceed ``limit``
    (from its declared length, or while it arrives)."""
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
    return b"".join(chunks)
