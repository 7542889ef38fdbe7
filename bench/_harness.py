"""What every benchmark shares: a real ``tidings serve`` process on a free port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidings", "serve", "--port", str(self.port), "--data-dir", str(self.data_dir),
             "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, **self.env} if self.env else None,
        )
        deadline = time.monotonic() + 30
        while not (self.data_dir / "admin.token").exists() or not self._listening():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("server did not start")
            time.sleep(0.05)
        return self

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
            return True
        except OSError:
            return False

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return (self.data_dir / "admin.token").read_text().strip()


async def post(session: aiohttp.ClientSession, url: str, method: str, body: bytes) -> bytes:
    async with session.post(f"{url}/v1/{method}", data=body) as r:
        data = await r.read()
        if r.status != 200:
            raise RuntimeError(f"{method}: {r.status} {data[:200]!r}")
        return data




def rss_bytes(pid: int) -> int:
    """Resident memory of a process and its children (psutil): the sum of their RSS, which
    counts the pages they share (libraries, the interpreter) once per process."""
    return sum(memory_of(pid, "rss").values())


def memory_of(pid: int, kind: str = "rss") -> dict[int, int]:
    """``kind`` (``rss``, or ``pss``: each shared page divided among the processes that
    map it, so the sum is the group's real total) of a process and each of its children."""
    import psutil

    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    out: dict[int, int] = {}
    for p in procs:
        try:
            info = p.memory_full_info() if kind == "pss" else p.memory_info()
            out[p.pid] = int(getattr(info, kind))
        except psutil.Error:
            pass
    return out
