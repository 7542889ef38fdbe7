"""The broker's end of the link its fronts hand checked publishes over
(``core.link_wire``; docs/scaling.md, "The link").

It serves one thing, ``icrc72_publish`` of a batch a front has checked and stamped,
answered exactly as the private HTTP route ``/_internal/publish`` answers it (the two
share :func:`internal.commit_batch`). Each request runs as a task of its own, so a
connection carries many at once and a slow commit holds up only its own answer.

The socket is in the private data folder (0600), and a connection is served only after
its first frame, the secret the broker gave its fronts, matches. A frame that does not
decode, or is longer than the largest batch can be, comes from no front of ours: the
connection is closed (said once in the log), and what it had in flight is still answered
where the connection allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import socket
import time
from collections.abc import Callable

import msgspec

from ..broker import Broker
from ..core.link_wire import HEAD_BYTES, MAX_HELLO_BYTES, LinkAnswer, LinkRequest, frame, length
from ..core.undecodable import UNDECODABLE
from ..errors import ApiError, StoreUnavailable
from .app import api_error, error_response
from .internal import commit_batch

__all__ = ["LinkServer"]

log = logging.getLogger("tidings.api")
_decode_request = msgspec.msgpack.Decoder(LinkRequest).decode
_encode = msgspec.msgpack.Encoder().encode


class _Refused(Exception):
    """A frame no front of ours sends."""


class LinkServer:
    """Serves the link on a listening Unix socket until :meth:`close`."""

    def __init__(self, broker: Broker, secret: str,
                 noted: Callable[[int, bytes], None] | None = None) -> None:
        """``noted``: given each publish's arrival (``time.time_ns``) and its answer's
        body once answered (``bench.profile hops`` only: ``hops.link_noter``)."""
        self._broker = broker
        self._noted = noted
        self._secret = secret.encode()
        # As the private route: a batch re-encoded a little larger than the body still fits.
        self._max_frame = 2 * broker.settings.max_body_bytes + 4096
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_unix_server(self._connection, sock=sock, limit=2**20)

    async def close(self) -> None:
        """Stop taking connections and wait for the requests in flight to be answered (the
        fronts have stopped first, so no new ones come)."""
        if self._server is not None:
            self._server.close()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            hello = await _read_frame(reader, MAX_HELLO_BYTES)
            if hello is None or not hmac.compare_digest(hello, self._secret):
                raise _Refused("a connection to the link did not give the fronts' secret")
            while (payload := await _read_frame(reader, self._max_frame)) is not None:
                arrived = time.time_ns() if self._noted is not None else 0
                try:
                    request = _decode_request(payload)
                except UNDECODABLE as e:
                    raise _Refused(f"a frame on the link did not decode: {e}") from None
                task = asyncio.create_task(self._serve(request, len(payload), writer, arrived))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except _Refused as e:
            log.warning("%s; the connection is closed", e)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the front went away: what it had in flight is answered to nobody
        finally:
            writer.close()

    async def _serve(self, request: LinkRequest, nbytes: int, writer: asyncio.StreamWriter, arrived: int) -> None:
        broker = self._broker
        ticket = None
        try:
            ticket = broker.overload.admit(nbytes)  # before the token's look-up waits
            with broker.overload.waiting():
                caller = await broker.auth.principal(request.authorization or None)
            response = await commit_batch(broker, caller, request.batch)
        except (ApiError, StoreUnavailable) as e:
            response = api_error(e)
        except Exception:  # as the HTTP face: logged, answered 500 without detail
            log.exception("a publish handed over the link failed")
            response = error_response(500, "internal", "internal error")
        finally:
            if ticket is not None:
                broker.overload.release(ticket)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers
                   if k != b"content-length"]
        answer = _encode(LinkAnswer(request.ref, response.status_code, headers, bytes(response.body)))
        if self._noted is not None:
            self._noted(arrived, bytes(response.body))
        if not writer.is_closing():
            writer.write(frame(answer))
            with contextlib.suppress(ConnectionError):
                await writer.drain()


async def _read_frame(reader: asyncio.StreamReader, limit: int) -> bytes | None:
    """The next frame's payload, or None at the end of the stream."""
    try:
        head = await reader.readexactly(HEAD_BYTES)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return None
    n = length(head)
    if n > limit:
        raise _Refused(f"a frame on the link is {n:,} bytes, past {limit:,}")
    return await reader.readexactly(n)
