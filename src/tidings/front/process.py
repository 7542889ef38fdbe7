"""Front processes: started and watched by the broker process, each listening on the
public port beside it (``SO_REUSEPORT``: the kernel spreads connections over them).

A front dies with its broker (``PR_SET_PDEATHSIG``), so a broker killed with SIGKILL never
leaves fronts holding the port; a front that dies is started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
from dataclasses import asdict
from typing import Any

from .app import FrontConfig

__all__ = ["FrontPool", "listening_socket"]

log = logging.getLogger("tidings.front")
_ENV = "TIDINGS_FRONT_CONFIG"
_PR_SET_PDEATHSIG = 1


def listening_socket(host: str, port: int, *, listen: bool = True, first: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port`` that other processes may bind too; with
    ``listen`` False it holds the port but takes no connection yet.

    ``first`` (the broker's bind, before its fronts) refuses a port that anything holds
    already, with ``OSError``: sockets of the same user that all set ``SO_REUSEPORT`` may
    share a port, so a second ``tidings serve`` on a port in use would otherwise start
    and take half of the first one's connections."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if first and port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
            probe.bind((host, port))
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    sock.setblocking(False)
    return sock


class FrontPool:
    """``count`` front processes for the broker listening on ``host:port``."""

    def __init__(self, config: FrontConfig, host: str, port: int, count: int) -> None:
        self._env = {**os.environ, _ENV: json.dumps({
            **asdict(config), "host": host, "port": port, "parent": os.getpid(),
        })}
        self._count = count
        self._procs: list[asyncio.subprocess.Process] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.returncode is None]

    async def start(self) -> None:
        """Start the fronts and return once each listens (or has failed to)."""
        for slot in range(self._count):
            self._procs.append(await self._spawn())
            self._tasks.append(asyncio.create_task(self._watch(slot)))

    async def _spawn(self) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings.front", env=self._env, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None
        with contextlib.suppress(TimeoutError):
            # The front says "listening" once it accepts connections (or closes its output).
            await asyncio.wait_for(proc.stdout.readline(), 30)
        return proc

    async def _watch(self, slot: int) -> None:
        delay = 0.2
        while True:
            code = await self._procs[slot].wait()
            if self._stopping:
                return
            log.warning("front process %d exited with %s; starting another", self._procs[slot].pid, code)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            self._procs[slot] = await self._spawn()

    async def stop(self) -> None:
        self._stopping = True
        for p in self._procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        for p in self._procs:
            try:
                await asyncio.wait_for(p.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                await p.wait()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def main() -> int:
    """A front process (``python -m tidings.front``), configured by its broker."""
    import uvicorn

    from ..http1 import Http1, WsHandshake
    from ..logs import configure
    from ..runtime import tune_gc

    conf = json.loads(os.environ[_ENV])
    # Die with the broker: a front alone would keep the port and answer 503 forever.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != conf["parent"]:
        return 0  # the broker died before the line above
    configure(conf["log_level"], conf["log_format"], process="front")
    config = FrontConfig(uds=conf["uds"], secret=conf["secret"], max_body_bytes=conf["max_body_bytes"],
                         max_batch_items=conf["max_batch_items"], max_frame_bytes=conf["max_frame_bytes"],
                         max_waiting_bytes=conf["max_waiting_bytes"], max_waiting_requests=conf["max_waiting_requests"],
                         link=conf.get("link"))
    sock = listening_socket(conf["host"], conf["port"])
    server = uvicorn.Server(uvicorn.Config(
        _app(config), http=Http1, lifespan="on", log_level="debug" if conf["log_level"] == "debug" else "warning",
        access_log=False, log_config=None,
        server_header=False, timeout_graceful_shutdown=5,
        # As the broker's own (server.py): a message past the limit closes with 1009.
        ws=WsHandshake, ws_max_size=config.max_frame_bytes, ws_per_message_deflate=False,
    ))
    tune_gc()

    async def run() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.005)
        print("listening", flush=True)  # the broker waits for this line
        sys.stdout.close()
        await task

    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(run())
    else:
        uvloop.run(run())
    return 0


def _app(config: FrontConfig) -> Any:
    from .app import front_app

    app = front_app(config)
    if os.environ.get("TIDINGS_HOPS_DIR"):  # bench.profile hops only (tidings/hops.py); else not imported
        from ..hops import asgi

        app = asgi(app, "front")
    return app
