"""Reading settings from a TOML file (``tidings serve --config FILE``): the file's names
are the settings' (``Settings`` field names, the environment's without ``TIDINGS_``),
its values TOML's own types, checked against each setting's type here and against its
bounds by ``Settings``."""

from __future__ import annotations

import difflib
import os
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["read_config"]

_MAX_CONFIG_BYTES = 1 << 20
"""A config file is a page of settings; anything larger is not one (and is not read)."""


def read_config(path: Path, known: Mapping[str, Any]) -> dict[str, Any]:
    """The settings in the TOML file at ``path``, typed; a clear ``ConfigError`` for a path
    that is a symbolic link, not a regular file, unreadable, too large, not UTF-8 or not
    TOML, and for a name not in ``known`` (setting name: its type) or a value of the wrong
    type. Bounds are the settings' own, checked when they are made."""
    if path.is_symlink():
        raise ConfigError(f"the config file {path} is a symbolic link: give the file itself ({os.path.realpath(path)})")
    try:
        # O_NONBLOCK: a FIFO put in its place must not hang the start (it is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError(f"no config file at {path}") from None
    except OSError as e:
        raise ConfigError(f"cannot read the config file {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"the config file {path} is not a regular file")
        if st.st_size > _MAX_CONFIG_BYTES:
            raise ConfigError(f"the config file {path} is larger than {_MAX_CONFIG_BYTES} bytes")
        data = os.read(fd, _MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read the config file {path}: {e.strerror}") from None
    finally:
        os.close(fd)
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"the config file {path} is not UTF-8 (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"the config file {path} is not valid TOML: {e}") from None
    out: dict[str, Any] = {}
    for key, value in doc.items():
        typ = known.get(key)
        if typ is None:
            near = difflib.get_close_matches(key.lower().removeprefix("tidings_"), known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else " (docs/operations.md lists the settings)"
            raise ConfigError(f"{path}: unknown setting {key!r}{hint}")
        out[key] = _from_toml(path, key, typ, value)
    return out


def _from_toml(path: Path, name: str, typ: Any, value: Any) -> Any:
    kind = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
    }.get(kind, isinstance(value, str))
    if not ok:
        want = {"int": "an integer", "float": "a number", "bool": "true or false"}.get(kind, "a string")
        raise ConfigError(f"{path}: {name} must be {want}, not {type(value).__name__} {_short(value)}")
    if kind == "float":
        try:
            return float(value)
        except OverflowError:
            raise ConfigError(f"{path}: {name} = {_short(value)} is out of range") from None
    return Path(value) if kind == "Path" else value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
