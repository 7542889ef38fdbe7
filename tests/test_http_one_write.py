"""An answer's head and body leave in one write (``tidings.http1``), on a real uvicorn
server and socket: what each write to the connection held, recorded at the transport."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tidings.http1 import Http1

_writes: list[bytes] = []


class _Recorded:
    def __init__(self, transport: Any) -> None:
        self._t = transport

    def write(self, data: bytes) -> None:
        _writes.append(bytes(data))
        self._t.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)


class _RecordingHttp1(Http1):
    def connection_made(self, transport: Any) -> None:
        super().connection_made(_Recorded(transport))  # type: ignore[arg-type]


async def _plain(request: Request) -> Response:
    await request.body()
    return Response(b'{"ok":1}', media_type="application/json")


async def _stream(request: Request) -> StreamingResponse:
    async def parts() -> AsyncIterator[bytes]:
        await asyncio.sleep(0.3)
        yield b"late"

    return StreamingResponse(parts())


async def _slow(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
    await asyncio.sleep(0.3)
    await send({"type": "http.response.body", "body": b"body"})


def _app() -> Any:
    inner = Starlette(routes=[Route("/plain", _plain, methods=["GET", "HEAD", "POST"]), Route("/stream", _stream)])

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/slow":
            await _slow(scope, receive, send)
        else:
            await inner(scope, receive, send)

    return app


@pytest.fixture
async def port() -> AsyncIterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(_app(), host="127.0.0.1", port=free, http=_RecordingHttp1,
                                          loop="asyncio", lifespan="off", log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    _writes.clear()
    yield free
    server.should_exit = True
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)


async def _read_answer(r: asyncio.StreamReader, *, body: bool = True) -> bytes:
    head = await r.readuntil(b"\r\n\r\n")
    length = next((int(v) for k, _, v in (line.partition(b":") for line in head.split(b"\r\n"))
                   if k.lower() == b"content-length"), 0)
    return head + (await r.readexactly(length) if body else b"")


async def test_an_answer_leaves_in_one_write_and_each_on_a_kept_connection(port: int) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(3):
        w.write(b"POST /plain HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        answer = await _read_answer(r)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'\r\n\r\n{"ok":1}')
    assert len(_writes) == 3
    assert all(x.endswith(b'{"ok":1}') and x.startswith(b"HTTP/1.1 200") for x in _writes)
    w.close()


async def test_a_closing_answer_leaves_whole_before_the_close(port: int) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET /plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(r.read(), 5)  # to the end: the server closed
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'{"ok":1}')
    assert _writes == [answer]
    w.close()


async def test_a_head_with_no_body_to_follow_leaves_at_once(port: int) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"HEAD /plain HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(_read_answer(r, body=False), 2)
    assert head.startswith(b"HTTP/1.1 200") and b"content-length: 8" in head.lower()
    w.close()


@pytest.mark.parametrize("path", ["/slow", "/stream"])
async def test_a_head_whose_body_is_awaited_leaves_before_it(port: int, path: str) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 0.25)  # the body comes after 0.3 s
    assert head.startswith(b"HTTP/1.1 200")
    assert _writes == [head]
    rest = r.readuntil(b"late") if path == "/stream" else r.readexactly(4)
    assert (await asyncio.wait_for(rest, 5)).endswith(b"late" if path == "/stream" else b"body")
    w.close()


async def test_a_continue_leaves_first_and_alone(port: int) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"POST /plain HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    w.write(b"{}")
    answer = await asyncio.wait_for(_read_answer(r), 5)
    assert _writes == [b"HTTP/1.1 100 Continue\r\n\r\n", answer]
    w.close()
