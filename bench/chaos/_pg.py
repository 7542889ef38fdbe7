"""Throwaway PostgreSQL clusters for fault injection: a primary, a streaming standby made
with ``pg_basebackup``, restarts, promotion. Never the machine's shared server: each
cluster is its own ``initdb`` on a free port, run as the ``postgres`` user."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from pathlib import Path

__all__ = ["PgNode", "base_dir", "pg_bin", "server_port"]

# Outgoing connections take their local ports from the kernel's ephemeral range; a
# server port picked there may be some client's by the time the server binds it (seen in
# CI: a standby's port, chosen seconds before its start, was taken). Below that range only
# another explicit picker can collide, and ``start`` moves off such a collision.
_PORTS = range(20000, 32000)


def base_dir(prefix: str = "tidings-chaos-") -> Path:
    """A new folder under the system's temporary one that the ``postgres`` user owns."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(d, "postgres", "postgres")
    return d


def pg_bin() -> Path:
    """The newest installed PostgreSQL's programs (``/usr/lib/postgresql/<v>/bin``)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    if not found:
        raise RuntimeError("no PostgreSQL server programs under /usr/lib/postgresql/*/bin")
    return Path(found[-1])


def server_port() -> int:
    """A port on 127.0.0.1 free now, from below the ephemeral range."""
    import random
    import socket

    for _ in range(200):
        port = random.choice(_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port found in 20000-31999 on 127.0.0.1")


def _as_postgres(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a server program as the ``postgres`` user (initdb refuses root)."""
    cmd = ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/")
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr[-2000:])
    return done


class PgNode:
    """One PostgreSQL server in ``root`` on ``port`` (127.0.0.1 only, trust authentication).
    ``root``'s parent must be one the ``postgres`` user can enter (``base_dir``)."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port if port is not None else server_port()
        self._started = False
        self.data = root / "data"
        self.log = root / "server.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _prepare_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.root.chmod(0o700)

    def init(self, *, synchronous: bool = False) -> None:
        """``initdb`` and its settings: streaming replication allowed; ``synchronous``:
        commits wait for a standby's flush (``synchronous_standby_names = '*'``)."""
        self._prepare_root()
        _as_postgres([str(pg_bin() / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                      "--no-sync", "-E", "UTF8"])
        self._conf(
            "listen_addresses = '127.0.0.1'", f"port = {self.port}", f"unix_socket_directories = '{self.root}'",
            "wal_level = replica", "max_wal_senders = 8", "hot_standby = on", "max_connections = 200",
            "fsync = on", "synchronous_commit = on", "wal_keep_size = '256MB'",
            f"synchronous_standby_names = '{'*' if synchronous else ''}'",
        )

    def _conf(self, *lines: str) -> None:
        with open(self.data / "postgresql.auto.conf", "a") as f:
            f.write("\n".join(lines) + "\n")

    def standby_of(self, primary: PgNode) -> None:
        """Make this node a streaming standby of ``primary`` (``pg_basebackup -R``)."""
        self._prepare_root()
        if self.data.exists():
            shutil.rmtree(self.data)
        _as_postgres([str(pg_bin() / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                      "-D", str(self.data), "-R", "-X", "stream", "-c", "fast", "--no-sync"])
        # Promoted, it waits for no standby until one is attached (``synchronous``).
        self._conf(f"port = {self.port}", f"unix_socket_directories = '{self.root}'",
                   f"primary_conninfo = 'host=127.0.0.1 port={primary.port} user=postgres application_name=standby'",
                   "synchronous_standby_names = ''")

    def synchronous(self, on: bool) -> None:
        """Whether this primary's commits wait for a standby's flush from now on."""
        self.sql(f"ALTER SYSTEM SET synchronous_standby_names = '{'*' if on else ''}'")
        self.sql("SELECT pg_reload_conf()")

    def start(self) -> None:
        """Start the server. If its port is taken: before its first start nobody knows the
        port yet, so it moves to another; after, it waits for the port (up to 30 s)."""
        end = time.monotonic() + 30
        while True:
            seen = self.log.stat().st_size if self.log.exists() else 0
            try:
                _as_postgres([str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                              "start"])
            except subprocess.CalledProcessError:
                if not self._port_was_taken(seen) or time.monotonic() > end:
                    raise
                if not self._started:
                    self.port = server_port()
                    self._conf(f"port = {self.port}")
                time.sleep(0.5)
                continue
            self._started = True
            return

    def _port_was_taken(self, since: int) -> bool:
        try:
            with open(self.log, "rb") as f:
                f.seek(since)
                return b"Address already in use" in f.read()
        except OSError:
            return False

    def stop(self, mode: str = "fast") -> None:
        """``mode``: ``smart``, ``fast`` or ``immediate`` (a crash: recovery at start)."""
        with _quiet():
            _as_postgres([str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"])

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def promote(self) -> None:
        _as_postgres([str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "promote"])

    def sql(self, statement: str) -> str:
        out = _as_postgres([str(pg_bin() / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                            "-d", "postgres", "-Atc", statement], timeout=30)
        return out.stdout.strip()

    def wait_streaming(self, timeout: float = 30) -> None:
        """Wait until a standby streams from this primary."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with _quiet():
                if self.sql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") not in ("", "0"):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"no standby streams from 127.0.0.1:{self.port}")

    def destroy(self) -> None:
        with _quiet():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class _quiet:
    """Ignore a server program's failure (stopping a server that is not running)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, (subprocess.CalledProcessError, subprocess.TimeoutExpired))
