"""Running the service: the broker on the embedded store behind uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import secrets
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

from .api import create_app
from .api.internal import internal_app
from .api.link import LinkServer
from .broker import Broker
from .errors import ConfigError, StoreError
from .front import FrontConfig, FrontPool
from .front.app import BROKER_KEEPALIVE_S
from .front.process import listening_socket
from .http1 import Http1, WsHandshake
from .logs import announce
from .runtime import tune_gc
from .settings import Settings
from .store import disk_cause, redact_address, store_for

__all__ = ["serve"]


def serve(settings: Settings) -> int:
    """Run until SIGINT or SIGTERM; return the exit status."""
    _private_data_dir(settings)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(_serve(settings))
    return uvloop.run(_serve(settings))


def _private_data_dir(settings: Settings) -> None:
    """Everything the server writes is its owner's alone: the data folder 0700 (tightened
    if an older version left it looser), every file created 0600 (docs/security.md)."""
    os.umask(0o077)
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if settings.data_dir.stat().st_mode & 0o077:
            os.chmod(settings.data_dir, 0o700)
        token = settings.data_dir / "admin.token"
        if token.exists() and token.stat().st_mode & 0o077:
            os.chmod(token, 0o600)
    except OSError as e:  # one line that names the cause and the path, not a traceback
        raise StoreError(f"cannot use the data folder {settings.data_dir}: "
                         f"{disk_cause(settings.data_dir / 'admin.token', e)}") from None


async def _serve(settings: Settings) -> int:
    # A broadcaster is forgotten by the others 3 leases after its last heartbeat (broker.cluster).
    broker = Broker(settings, store_for(
        settings.store, settings.db_path, fsync=settings.commit_fsync, timeout_s=settings.store_timeout_s,
        name=f"tidings {settings.broadcaster_id}",
        peers_within_s=3 * settings.lease_s,
    ))
    with contextlib.suppress(NotImplementedError, RuntimeError):
        # An operator's (or a fault test's) look inside a process that seems stuck: every
        # task's stack, logged (docs/operations.md).
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _dump_tasks)
    async with broker:
        tune_gc()
        token_file = settings.data_dir / "admin.token"
        created = await broker.ensure_admin(token_file)
        app = create_app(broker, manage_broker=False)
        fronts = settings.front_processes()
        pool: _Fronts | None = None
        sockets = None
        if fronts:
            # Every process binds the port itself (SO_REUSEPORT). The broker takes its
            # first connection only once the fronts listen, so that connections made
            # right after start are spread over all of them.
            try:
                sock = listening_socket(settings.host, settings.port, listen=False, first=True)
            except OSError as e:
                announce(f"tidings: could not listen on {settings.host}:{settings.port}: {e}", error=True)
                return 1
            sockets = [sock]
            bound_host, bound_port = sock.getsockname()[:2]
            pool = await _start_fronts(broker, app, settings, bound_host, bound_port, fronts)
        server = _Server(_config(app, settings), broker, settings.drain_s)
        app.state.stopping = lambda: server.should_exit  # the console's event streams end
        task = asyncio.create_task(server.serve(sockets=sockets))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if task.done():
            await task
            if pool is not None:
                await pool.stop()
            announce(f"tidings: could not listen on {settings.host}:{settings.port}", error=True)
            return 1
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        where = redact_address(settings.store) if settings.store else settings.db_path
        announce(f"tidings {where} listening on http://{host}:{port}")
        announce(f"  OpenAPI: http://{host}:{port}/openapi.json")
        if created:
            announce(f"  admin token written to {token_file} (created now)")
        else:
            announce(f"  admin token: see {token_file}")
        announce("  more principals: tidings principal create NAME  (prints the token)")
        if pool is not None:
            announce(f"  {fronts + 1} processes: the broker and {fronts} front process(es) (TIDINGS_WORKERS)")
        xmpp = await _start_xmpp(broker, settings)
        try:
            await task
        finally:
            if pool is not None:
                await pool.stop()
            if xmpp is not None:
                await xmpp.stop()
    return 0


def _dump_tasks() -> None:
    out = io.StringIO()
    tasks = asyncio.all_tasks()
    for t in sorted(tasks, key=lambda t: t.get_name()):
        t.print_stack(limit=12, file=out)
    logging.getLogger("tidings.server").warning("SIGUSR1: %d tasks\n%s", len(tasks), out.getvalue())


def _config(app: Any, settings: Settings, role: str = "broker") -> uvicorn.Config:
    if os.environ.get("TIDINGS_HOPS_DIR"):  # bench.profile hops only (tidings/hops.py); else not imported
        from .hops import asgi

        app = asgi(app, role)
    return uvicorn.Config(
        app, host=settings.host, port=settings.port, http=Http1, lifespan="off",
        # uvicorn's own lines below warning only when debugging (its start-up chatter
        # otherwise; refusals before the app are logged at debug: docs/security.md).
        log_level="debug" if settings.log_level == "debug" else "warning", access_log=False, server_header=False,
        # uvicorn's own loggers go to ours (tidings.logs: the format, the scrub) rather
        # than to handlers of its own.
        log_config=None,
        # The console's event streams end when they see should_exit (within a second);
        # this bounds any other connection that would hold the shutdown up.
        timeout_graceful_shutdown=5,
        # The stream face (docs/streaming.md): the sans-I/O protocol stops reading a
        # socket while the app does not take its messages (back-pressure); a message
        # past the limit closes the connection with 1009.
        ws=WsHandshake, ws_max_size=settings.stream_max_frame_bytes, ws_per_message_deflate=False,
    )


class _Server(uvicorn.Server):
    """uvicorn's server, stopping in the order a load balancer needs: on the first SIGTERM
    (or SIGINT) ``/readyz`` turns unready at once, and new connections are still taken
    for a moment (at most a second, ``drain_s`` if less) so that whoever checks readiness
    can see it; then uvicorn stops taking connections and finishes the requests in
    flight, and the broker drains its pushes (``Broker.stop``). A second signal stops at
    once."""

    def __init__(self, config: uvicorn.Config, broker: Broker, drain_s: float) -> None:
        super().__init__(config)
        self._broker = broker
        self._notice_s = min(1.0, drain_s)
        self._loop = asyncio.get_running_loop()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            yield
            # A stop a signal asked for, done gracefully, is a clean exit (status 0), not
            # the signal raised again once the handlers are restored.
            self._captured_signals.clear()

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self._broker.draining:
            super().handle_exit(sig, frame)
            return
        self._broker.begin_draining()
        self._loop.call_soon_threadsafe(self._loop.call_later, self._notice_s, super().handle_exit, sig, frame)


class _Fronts:
    """The front processes and the broker's private socket they hand requests to."""

    def __init__(self, pool: FrontPool, internal: uvicorn.Server, task: asyncio.Task[None], link: LinkServer) -> None:
        self.pool, self.internal, self.task, self.link = pool, internal, task, link

    async def stop(self) -> None:
        await self.pool.stop()
        await self.link.close()
        self.internal.should_exit = True
        await self.task


async def _start_fronts(broker: Broker, app: Any, settings: Settings, host: str, port: int, count: int) -> _Fronts:
    path = _private_socket_path(settings)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # left by a broker that was killed
    uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    uds.bind(str(path))  # 0600 by the umask: only this user's processes may connect
    uds.listen(1024)
    secret = secrets.token_urlsafe(32)
    config = _config(internal_app(broker, app, secret), settings, "internal")
    # Longer than the fronts keep an idle pooled connection (POOL_KEEPALIVE_S): the client
    # side lets go first, so no request is sent on a connection the broker is closing.
    config.timeout_keep_alive = int(BROKER_KEEPALIVE_S)
    internal = uvicorn.Server(config)
    # _serve, not serve: the public server already handles SIGINT and SIGTERM; a second
    # handler would take them from it.
    task = asyncio.create_task(internal._serve(sockets=[uds]))
    while not internal.started and not task.done():
        await asyncio.sleep(0.01)
    # Checked publishes go over a link of frames of their own (docs/scaling.md, "The link").
    link_path = path.with_name("broker-link.sock")
    with contextlib.suppress(FileNotFoundError):
        link_path.unlink()
    link_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    link_sock.bind(str(link_path))
    link_sock.listen(1024)
    noted = None
    if os.environ.get("TIDINGS_HOPS_DIR"):  # bench.profile hops only (tidings/hops.py); else not imported
        from .hops import link_noter

        noted = link_noter()
    link = LinkServer(broker, secret, noted)
    await link.start(link_sock)
    pool = FrontPool(FrontConfig(str(path), secret, settings.max_body_bytes, settings.max_batch_items,
                                 settings.stream_max_frame_bytes, log_level=settings.log_level,
                                 log_format=settings.log_format, max_waiting_bytes=settings.max_waiting_bytes,
                                 max_waiting_requests=settings.max_waiting_requests, link=str(link_path)),
                     host, port, count)
    await pool.start()
    return _Fronts(pool, internal, task, link)


def _private_socket_path(settings: Settings) -> Path:
    path = (settings.data_dir / "broker.sock").absolute()
    if len(str(path)) < 100:  # sun_path holds 108 bytes
        return path
    return Path(tempfile.mkdtemp(prefix="tidings-")) / "broker.sock"


async def _start_xmpp(broker: Broker, settings: Settings) -> Any:
    """The XMPP component (docs/xmpp.md), when ``TIDINGS_XMPP_COMPONENT`` names one."""
    if not settings.xmpp_component:
        return None
    try:
        from .xmpp import XmppFace
    except ImportError:
        raise ConfigError(
            "TIDINGS_XMPP_COMPONENT is set but slixmpp is missing: pip install 'tidings[xmpp]'"
        ) from None
    face = XmppFace(broker, settings)
    await face.start()
    announce(f"  XMPP component {settings.xmpp_component} -> {settings.xmpp_host}:{settings.xmpp_port}")
    return face
