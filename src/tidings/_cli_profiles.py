"""Where and who for the commands that act through the API: ``--url``, ``--token``,
``--profile``, the environment, named profiles in the user's config file, and the local
server's ``var/admin.token`` (docs/cli.md, "Where and who").

The profiles file is ``$XDG_CONFIG_HOME/tidings/profiles.toml`` (``~/.config`` when the
variable is unset), written with mode 0600 in a folder of mode 0700, since it holds
tokens. A token is never printed: ``profile show`` says only whether one is set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .settings import Settings

__all__ = ["Target", "add_api_options", "add_profile_parser", "profiles_path", "resolve", "run_profile"]

DEFAULT_URL = "http://127.0.0.1:8072"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class Target:
    url: str
    token: str
    source: str
    """Where the token came from (said in errors; never the token itself)."""


def profiles_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tidings" / "profiles.toml"


def add_api_options(p: argparse.ArgumentParser) -> None:
    """The options of every command that acts through the API (before or after its action)."""
    p.add_argument("--url", default=argparse.SUPPRESS, help=f"the service (env TIDINGS_URL; default {DEFAULT_URL})")
    p.add_argument("--token", default=argparse.SUPPRESS,
                   help="bearer token (env TIDINGS_TOKEN; '-' reads it from stdin; default: the profile's, "
                        "else var/admin.token of a server run here)")
    p.add_argument("--profile", default=argparse.SUPPRESS, metavar="NAME",
                   help="a named profile of the profiles file (env TIDINGS_PROFILE; default: the file's default)")
    p.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS,
                   help="the local server's data folder, for its admin.token (default ./var)")


def _load() -> dict[str, Any]:
    path = profiles_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    try:
        doc = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid TOML ({e}); fix it or remove it") from None
    if path.stat().st_mode & 0o077:
        print(f"tidings: warning: {path} is readable by others; 'chmod 600 {path}' (it holds tokens)",
              file=sys.stderr)
    return doc


def resolve(args: argparse.Namespace) -> Target:
    """The service and token: flags, then ``--profile``, then the environment, then the
    default profile, then a local server's admin token. Raises :class:`ConfigError`."""
    url: str | None = getattr(args, "url", None)
    token: str | None = getattr(args, "token", None)
    source = "--token"
    if token == "-":
        token = sys.stdin.readline().strip()
    explicit = getattr(args, "profile", None)
    doc = _load() if (explicit or url is None or token is None) else {}
    profiles = doc.get("profiles", {}) if isinstance(doc.get("profiles"), dict) else {}
    if explicit is not None and explicit not in profiles:
        raise ConfigError(f"no profile {explicit!r} in {profiles_path()}; 'tidings profile ls' lists them, "
                          f"'tidings profile add {explicit} --url URL --token-stdin' makes it")
    chosen = explicit or os.environ.get("TIDINGS_PROFILE") or doc.get("default")
    prof = profiles.get(chosen, {}) if isinstance(chosen, str) else {}
    layers: list[tuple[str | None, str | None, str]] = []
    if explicit is not None:
        layers.append((prof.get("url"), prof.get("token"), f"profile {explicit!r}"))
    layers.append((os.environ.get("TIDINGS_URL"), os.environ.get("TIDINGS_TOKEN"), "TIDINGS_TOKEN"))
    if explicit is None and prof:
        layers.append((prof.get("url"), prof.get("token"), f"profile {chosen!r}"))
    for u, t, where in layers:
        url = url or u
        if token is None and t:
            token, source = t, where
    url = url or DEFAULT_URL
    if token is None:
        path = Settings.from_env(data_dir=getattr(args, "data_dir", None)).data_dir / "admin.token"
        if path.is_file():
            token, source = path.read_text().strip(), str(path)
    if not token:
        raise ConfigError("no token: give --token, set TIDINGS_TOKEN, make a profile "
                          "('tidings profile add NAME --url URL --token-stdin'), or run beside a server's var/")
    return Target(url.rstrip("/"), token, source)


# -- tidings profile ----------------------------------------------------------------------


def add_profile_parser(sub: Any) -> None:
    p = sub.add_parser("profile", help="named profiles (url and token) in the user's profiles file, as nats context")
    ps = p.add_subparsers(dest="action", required=True)
    add = ps.add_parser("add", help="add or replace a profile")
    add.add_argument("name")
    add.add_argument("--url", required=True)
    add.add_argument("--token-stdin", action="store_true", help="read the token from stdin (kept out of the history)")
    add.add_argument("--token", help="the token (prefer --token-stdin: a command line is seen by others)")
    add.add_argument("--default", action="store_true", help="make it the default profile")
    ps.add_parser("ls", help="list the profiles (tokens are never shown)")
    show = ps.add_parser("show", help="a profile's url and whether it has a token")
    show.add_argument("name")
    use = ps.add_parser("use", help="make a profile the default")
    use.add_argument("name")
    rm = ps.add_parser("rm", help="remove a profile")
    rm.add_argument("name")


def run_profile(args: argparse.Namespace) -> int:
    doc = _load()
    profiles: dict[str, Any] = doc.get("profiles", {}) if isinstance(doc.get("profiles"), dict) else {}
    default = doc.get("default") if isinstance(doc.get("default"), str) else None
    name: str = getattr(args, "name", "")
    if args.action != "ls" and not _NAME.fullmatch(name):
        raise ConfigError(f"a profile name is 1 to 64 letters, digits, '_' or '-', not {name!r}")
    if args.action == "ls":
        for n, prof in sorted(profiles.items()):
            mark = "*" if n == default else " "
            print(f"{mark} {n:20} {prof.get('url', '')}")
        return 0
    if args.action in ("show", "use", "rm") and name not in profiles:
        raise ConfigError(f"no profile {name!r} in {profiles_path()}")
    if args.action == "show":
        prof = profiles[name]
        print(f"url = {prof.get('url', '')}\ntoken = {'(set)' if prof.get('token') else '(none)'}"
              f"\ndefault = {str(name == default).lower()}")
        return 0
    if args.action == "add":
        token = sys.stdin.readline().strip() if args.token_stdin else args.token
        profiles[name] = {"url": args.url, **({"token": token} if token else {})}
        if args.default or default is None:
            default = name
    elif args.action == "use":
        default = name
    else:
        del profiles[name]
        if default == name:
            default = None
    _save(default, profiles)
    print(f"{profiles_path()}: profile {name!r} {'removed' if args.action == 'rm' else 'saved'}")
    return 0


def _save(default: str | None, profiles: dict[str, Any]) -> None:
    """Write the file whole: a temporary file of mode 0600 renamed over it."""
    path = profiles_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = [f"default = {json.dumps(default)}", ""] if default else []
    for n, prof in sorted(profiles.items()):
        lines.append(f"[profiles.{n}]")
        # A JSON string with ASCII escapes is a TOML basic string.
        lines += [f"{k} = {json.dumps(str(v))}" for k, v in prof.items() if k in ("url", "token")]
        lines.append("")
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an old temporary file keeps its mode through O_CREAT
        os.write(fd, "\n".join(lines).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
