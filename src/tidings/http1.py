"""What the HTTP/1.1 layer answers before a request reaches the app, in tidings' shape.

uvicorn's httptools protocol answers a request it cannot parse (an unknown verb such as
``FOO``, a malformed request line, a header that is not HTTP) with a plain-text
``400 Invalid HTTP request received.``, and sets no bound on the size of a request's
head. :class:`Http1` is that protocol with the documented JSON error body
(``{"error": {"code", "message"}}``, docs/security.md) on those answers, and a bound on
the head (:data:`MAX_HEAD_BYTES`; past it ``431``). :class:`WsHandshake` does the same
for a WebSocket handshake the server refuses (a missing or bad ``Sec-WebSocket-Key``),
which uvicorn's sans-I/O protocol answered in plain text. The broker and the front
processes both serve with them (``uvicorn.Config(http=Http1, ws=WsHandshake)``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Final

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Response as WsResponse

__all__ = ["MAX_HEAD_BYTES", "Http1", "WsHandshake", "error_response"]

MAX_HEAD_BYTES: Final = 64 * 1024
"""The most a request line and its headers may take together (nginx's large buffers
hold 32 KiB; Node's default is 16 KiB). Past it: ``431``, and the connection closes."""

_REASONS: Final = {400: b"Bad Request", 431: b"Request Header Fields Too Large", 501: b"Not Implemented"}


def error_response(
    status: int, code: str, message: str, extra: dict[str, str] | None = None,
    defaults: list[tuple[bytes, bytes]] | None = None,
) -> bytes:
    """A whole ``Connection: close`` response with tidings' JSON error body; ``defaults``:
    the headers the server puts on every answer (uvicorn's ``date``)."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
    head += [name + b": " + value + b"\r\n" for name, value in defaults or ()]
    head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body), b"connection: close\r\n"]
    head += [f"{k}: {v}\r\n".encode("latin-1") for k, v in (extra or {}).items()]
    return b"".join(head) + b"\r\n" + body


class Http1(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering what it refuses in tidings' shape."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = 0
        """Bytes received while the current request's head is incomplete; -1 once it is."""
        self._parsed = 0
        """Bytes of the current request's target and headers, as the parser hands them over."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head = self._parsed = 0

    def on_url(self, url: bytes) -> None:
        self._parsed += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._parsed += len(name) + len(value) + 4  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head = -1
        if self._parsed > MAX_HEAD_BYTES:  # the whole head came in one read
            raise _HeadTooLarge
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before and self.cycle is not None:
            self.cycle.transport = _OneWrite(self.transport, self.cycle)  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserInvalidMethodError:
            # RFC 9110 15.6.2: a method the server does not recognise is 501.
            self._refuse(501, "method_not_implemented",
                         "the request's method is not one this server knows; API methods are called with POST",
                         {"allow": "POST"})
            return
        except httptools.HttpParserError as e:
            if isinstance(e.__context__, _HeadTooLarge):
                self._refuse_head()
            else:
                self._refuse(400, "malformed_request", f"the request is not valid HTTP/1.1: {_reason(e)}")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._head >= 0:
            # The head is not complete yet, so all of this was head: the parser keeps a
            # header it has not seen the end of, which would otherwise grow without bound.
            self._head += len(data)
            if self._head > MAX_HEAD_BYTES:
                self._refuse_head()

    def _refuse_head(self) -> None:
        self._refuse(431, "headers_too_large", f"the request line and headers take more than {MAX_HEAD_BYTES} bytes")

    def send_400_response(self, msg: str) -> None:
        # Whatever else of uvicorn's refuses a request (an invalid upgrade, say).
        self._refuse(400, "malformed_request", msg)

    def _refuse(self, status: int, code: str, message: str, extra: dict[str, str] | None = None) -> None:
        self.logger.debug("refused before the app: %s %s", status, message)
        if not self.transport.is_closing():
            self.transport.write(error_response(status, code, message, extra, self.server_state.default_headers))
            self.transport.close()


class _OneWrite:
    """One response's transport until its head has left: the head is held until the
    body's first write, and both leave in one ``send``. uvicorn writes them apart: two
    system calls per answer, and two reads for the client, where one of each does
    (BENCHMARKS.md, "One event per request"). A head whose body does not follow in the
    same turn of the event loop (an answer to HEAD; an app that awaits between the two)
    leaves on its own at the end of that turn."""

    __slots__ = ("_cycle", "_head", "_t")

    def __init__(self, transport: Any, cycle: Any) -> None:
        self._t = transport
        self._cycle = cycle
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._release()
            self._t.write(head + data)
        elif self._cycle.response_started:  # the head (a 100 Continue goes before the start)
            self._head = data
            asyncio.get_running_loop().call_soon(self._flush)
        else:
            self._t.write(data)

    def _release(self) -> None:
        self._head = None
        self._cycle.transport = self._t  # the rest of the response is written directly

    def _flush(self) -> None:
        head = self._head
        if head is not None:
            self._release()
            if not self._t.is_closing():
                self._t.write(head)

    def close(self) -> None:
        self._flush()
        self._t.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)


class WsHandshake(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol, refusing a handshake in tidings' shape."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # ``ServerProtocol.accept`` builds its refusals with ``self.reject``; so does
        # uvicorn for its own (a 500): both come here.
        self.conn.reject = _json_reject(self.conn.reject)  # type: ignore[method-assign, assignment]


def _json_reject(reject: Callable[[Any, str], WsResponse]) -> Callable[[Any, str], WsResponse]:
    def json_reject(status: Any, text: str) -> WsResponse:
        message = text.strip() or "the WebSocket handshake was refused"
        response = reject(status, json.dumps({"error": {"code": "websocket_refused", "message": message}}))
        del response.headers["Content-Type"]
        response.headers["Content-Type"] = "application/json"
        return response

    return json_reject


class _HeadTooLarge(Exception):
    """Raised in a parser callback: the head just parsed is past :data:`MAX_HEAD_BYTES`."""


def _reason(e: Exception) -> str:
    if isinstance(e, httptools.HttpParserCallbackError):
        # uvicorn's callbacks failed on what the parser took: the request target (an
        # authority-form CONNECT, a path that is not ASCII).
        return "the request target is not a path this server can read"
    # llhttp's reasons are short fixed texts ("Invalid header value char"); never the input.
    text = str(e)
    return text if text.isprintable() and len(text) <= 120 else "unparseable"
