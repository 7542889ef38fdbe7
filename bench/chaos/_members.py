"""Broadcaster processes for fault injection: started, killed, paused and resumed at will,
each reaching PostgreSQL, and its peers reaching it, through proxies the schedule can cut."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ._proxy import Proxy

__all__ = ["Member"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Member:
    """``tidings serve`` as broadcaster ``name``: its store address goes through ``db``
    (one proxy per database host), and the URL it advertises to its peers through ``peer``."""

    def __init__(self, name: str, root: Path, db: list[Proxy], settings: dict[str, str]) -> None:
        self.name = name
        self.dir = root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.db = db
        self.peer = Proxy(self.port)
        self.settings = settings
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.log = self.dir / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return (self.dir / "admin.token").read_text().strip()

    def share_token(self, first: Member) -> None:
        shutil.copy(first.dir / "admin.token", self.dir / "admin.token")

    def start(self) -> None:
        hosts = ",".join(f"127.0.0.1:{p.port}" for p in self.db)
        env = {
            **os.environ, "PYTHONUNBUFFERED": "1",
            "TIDINGS_STORE": f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write",
            "TIDINGS_BROADCASTER_ID": self.name, "TIDINGS_ADVERTISE_URL": f"http://127.0.0.1:{self.peer.port}",
            "TIDINGS_WORKERS": "1", **{f"TIDINGS_{k.upper()}": v for k, v in self.settings.items()},
        }
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tidings", "serve", "--port", str(self.port), "--data-dir", str(self.dir)],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start; see {self.log}")
            if (self.dir / "admin.token").exists() and _listening(self.port):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start in 60 s; see {self.log}")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None:
            if self.paused:
                self.resume()
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def pause(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.paused:
            self.proc.send_signal(signal.SIGCONT)
            self.paused = False

    def stop(self) -> None:
        if self.proc is None:
            return
        self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def log_lines(self, *needles: str, limit: int = 12) -> list[str]:
        """The last ``limit`` lines of this member's log that contain one of ``needles``."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line[:300] for line in lines if any(n in line for n in needles)][-limit:]

    def log_count(self, needle: str) -> int:
        try:
            return self.log.read_text(errors="replace").count(needle)
        except OSError:
            return 0


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False
