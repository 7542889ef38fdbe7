"""Per-hop timestamps of live events, for ``python -m bench.profile hops`` only.

Off unless ``TIDINGS_HOPS_DIR`` names a folder when a process starts; then, and only
then:

* the broker's tracing hook (:mod:`tidings.tracing`, the ``receive``/``commit``/
  ``route``/``push`` points the broker already calls) is a :class:`Recorder` instead of
  OpenTelemetry: it notes the wall clock (``time.time_ns``, comparable across the
  processes of one host) at each point, by event id;
* the ASGI apps of the broker (public and private socket) and of the front processes are
  wrapped by :func:`asgi`: it notes when a publish request (HTTP) or a stream ``publish``
  message (WebSocket) reached the app, and when its answer left, with the event ids
  that answer gave; the broker's link (``api.link``) notes the same of each publish a
  front handed over (:func:`link_noter`).

Nothing a client or a subscriber receives changes: the push carries the HTTP trace
headers it carries without the recorder (the first traced event's), no header is added.
Records stay in memory; ``SIGUSR2`` (or the broker's stop) writes each process's records
so far to ``TIDINGS_HOPS_DIR/hops-<pid>-<n>.msgpack`` (written under another name, then
renamed) and forgets them. With the variable unset nothing here is imported by the
server, the tracing hook stays None and the apps are not wrapped: the per-request path is
the same code as without this module (three checks of the variable, each once at a
process's start; tests/test_bench_hops.py holds that it is not imported).

Records (msgpack arrays, ``t_*`` in ns of ``time.time_ns``):

* ``["pub", id, t_receive, t_commit, t_committed, t_end]``: the broker took the event
  (rights, schemas), its append began, ended, and the hand-off to delivery ended;
* ``["push", sub_id, [ids], t_start, t_end, outcome]``: one push, from the worker taking
  the batch to its answer;
* ``["in", role, id, t_arrived, t_answered]``: a publish reached the app of ``role``
  (``front``, ``broker``: the public port; ``internal``: the broker's private socket,
  from a front) and was answered.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

__all__ = ["ENV", "MAX_RECORDS", "Recorder", "asgi", "link_noter", "recorder"]

ENV: Final = "TIDINGS_HOPS_DIR"

_now = time.time_ns
_recorder: Recorder | None = None
_lock = threading.Lock()

MAX_RECORDS: Final = 2_000_000
"""Records kept between two flushes (a few hundred MB at most): past it, a record is
dropped and counted, so a server left with the variable set cannot grow without end."""


class Recorder:
    """The process's records, and the tracing hook's interface (``tidings.tracing.Tracing``)."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.records: list[Any] = []
        self.dropped = 0
        """Records not kept since the last flush: ``MAX_RECORDS`` were waiting."""
        self._n = 0
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR2, lambda *_: self.flush())

    def keep(self, record: tuple[Any, ...]) -> None:
        if len(self.records) < MAX_RECORDS:
            self.records.append(record)
        else:
            self.dropped += 1

    def flush(self) -> None:
        records, self.records = self.records, []
        if self.dropped:
            records.append(("dropped", self.dropped))
            self.dropped = 0
        self._n += 1
        final = self.folder / f"hops-{os.getpid()}-{self._n}.msgpack"
        tmp = final.with_suffix(".tmp")
        tmp.write_bytes(msgspec.msgpack.encode(records))
        tmp.rename(final)

    # -- the tracing hook (tidings.tracing.Tracing's interface) ----------------------------

    def receive(self, rows: Sequence[Any]) -> _Publish:
        return _Publish(self)

    def push(self, sub_id: int, ids: Sequence[int], namespaces: Sequence[str], headers: Sequence[bytes]) -> _Push:
        from .core import tracecontext

        # What Push sends without a hook: the first traced event's context, or nothing.
        context = tracecontext.first_of(headers)
        return _Push(self, sub_id, list(ids), context.pairs() if context is not None else {})

    def close(self, timeout_s: float = 0.0) -> None:
        self.flush()


class _Publish:
    __slots__ = ("_ids", "_out", "_t")

    def __init__(self, out: Recorder) -> None:
        self._out = out
        self._t = [_now(), 0, 0]
        self._ids: Sequence[int] = ()

    def commit(self, accepted: Sequence[int]) -> None:
        self._t[1] = _now()

    def committed(self, accepted: Sequence[int], ids: Sequence[int] | None, error: str | None = None) -> None:
        self._t[2] = _now()
        self._ids = ids or ()

    def route(self, accepted: Sequence[int]) -> None:
        pass  # the same instant as committed

    def end(self, results: Sequence[Any] | None) -> None:
        t = _now()
        for i in self._ids:
            self._out.keep(("pub", i, self._t[0], self._t[1], self._t[2], t))


class _Push:
    __slots__ = ("_ids", "_out", "_sub", "_t", "headers")

    def __init__(self, out: Recorder, sub_id: int, ids: list[int], headers: dict[str, str]) -> None:
        self._out = out
        self._sub = sub_id
        self._ids = ids
        self._t = _now()
        self.headers = headers

    def end(self, outcome: str, reason: str) -> None:
        self._out.keep(("push", self._sub, self._ids, self._t, _now(), outcome))


def recorder() -> Recorder | None:
    """The process's recorder when ``TIDINGS_HOPS_DIR`` is set, else None."""
    global _recorder
    folder = os.environ.get(ENV, "").strip()
    if not folder:
        return None
    with _lock:
        if _recorder is None:
            _recorder = Recorder(folder)
        return _recorder


_PUBLISH_PATHS: Final = (b"/v1/icrc72_publish", b"/_internal/publish")
_ids_of = msgspec.json.Decoder(list[dict[str, Any] | None]).decode


class _StreamMessage(msgspec.Struct):
    op: str = ""
    ref: int | None = None
    refs: list[int] = []
    results: list[Any] = []


_stream_message = msgspec.json.Decoder(_StreamMessage).decode


def _ok_ids(results: list[Any]) -> list[int]:
    ids = []
    for r in results:
        ok = r.get("Ok") if isinstance(r, dict) else None
        if isinstance(ok, list) and ok and isinstance(ok[0], int):
            ids.append(ok[0])
    return ids


def link_noter() -> Any:
    """For the broker's link (``api.link``) when ``TIDINGS_HOPS_DIR`` is set, else None: a
    function of (arrived, answered, the answer's body) that notes each event the answer
    gave as an ``internal`` record, as the private socket's ``/_internal/publish`` was."""
    rec = recorder()
    if rec is None:
        return None
    keep = rec.keep

    def noted(arrived: int, body: bytes) -> None:
        t = _now()
        try:
            ids = _ok_ids(_ids_of(body))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        for i in ids:
            keep(("in", "internal", i, arrived, t))

    return noted


def asgi(app: Any, role: str) -> Any:
    """``app`` as it is when ``TIDINGS_HOPS_DIR`` is unset; else wrapped to note when each
    publish arrived and was answered (HTTP: ``icrc72_publish`` and the private
    ``_internal/publish``; WebSocket: each stream ``publish`` message)."""
    rec = recorder()
    if rec is None:
        return app
    keep = rec.keep

    async def http(scope: Any, receive: Any, send: Any) -> None:
        arrived = _now()
        body: list[bytes] = []

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if not message.get("more_body", False):
                    t = _now()
                    try:
                        ids = _ok_ids(_ids_of(b"".join(body)))
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        ids = []
                    for i in ids:
                        keep(("in", role, i, arrived, t))
            await send(message)

        await app(scope, receive, sending)

    async def websocket(scope: Any, receive: Any, send: Any) -> None:
        arrived: dict[int, int] = {}

        async def receiving() -> Any:
            message = await receive()
            if message["type"] == "websocket.receive":
                t = _now()
                text = message.get("text")
                if text is not None and '"publish"' in text:
                    try:
                        m = _stream_message(text)
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        return message
                    if m.op == "publish" and m.ref is not None:
                        arrived[m.ref] = t
            return message

        async def sending(message: Any) -> None:
            if message["type"] == "websocket.send":
                text = message.get("text")
                if text is not None and text.startswith('{"op":"results"'):
                    t = _now()
                    try:
                        m = _stream_message(text)
                    except (msgspec.DecodeError, msgspec.ValidationError):
                        m = None
                    if m is not None:
                        for ref, r in zip(m.refs, m.results, strict=False):
                            t0 = arrived.pop(ref, None)
                            ids = _ok_ids([r])
                            if t0 is not None and ids:
                                keep(("in", role, ids[0], t0, t))
            await send(message)

        await app(scope, receiving, sending)

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http" and scope.get("path", "").encode() in _PUBLISH_PATHS:
            await http(scope, receive, send)
        elif kind == "websocket":
            await websocket(scope, receive, send)
        else:
            await app(scope, receive, send)

    return wrapped
