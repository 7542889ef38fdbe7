"""Running ``tidings`` commands as a user would: a subprocess, with its own environment."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_MEASURED = (
    "import resource, sys; from tidings.cli import main; rc = main(sys.argv[1:]); sys.stdout.flush(); "
    "print('maxrss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)"
)


@dataclass
class Done:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if not line.startswith("maxrss_kib ")]

    @property
    def maxrss_mib(self) -> float:
        (line,) = [x for x in self.err.splitlines() if x.startswith("maxrss_kib ")]
        return int(line.split()[1]) / 1024


def cli_env(url: str | None, token: str | None, home: Path, **extra: str) -> dict[str, str]:
    """An environment with no tidings settings of the caller's, a config home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDINGS_")}
    env["XDG_CONFIG_HOME"] = str(home)
    if url is not None:
        env["TIDINGS_URL"] = url
    if token is not None:
        env["TIDINGS_TOKEN"] = token
    return {**env, **extra}


def tidings(*args: str, env: dict[str, str], stdin: bytes | None = None, cwd: Path | None = None,
            measured: bool = False, timeout: float = 60) -> Done:
    cmd = [sys.executable, "-c", _MEASURED, *args] if measured else [sys.executable, "-m", "tidings", *args]
    p = subprocess.run(cmd, input=stdin, capture_output=True, env=env, cwd=cwd, timeout=timeout)
    return Done(p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))


def start(*args: str, env: dict[str, str], **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tidings", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, **kw)
