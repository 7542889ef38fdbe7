"""Commands for operators: ``tidings backup`` and ``restore`` (the embedded store copied
while it runs, and put back), ``tidings config show`` (the effective settings).

::

    tidings backup DEST [--data-dir D] [--config FILE]
    tidings restore SRC --data-dir D [--force]
    tidings config show [--config FILE]

On PostgreSQL the database's own tools do it (docs/operations.md, "Backup and restore").
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from .errors import BackupError
from .settings import Settings

__all__ = ["add_ops_parsers", "run_backup", "run_config", "run_restore", "toml_string"]


def add_ops_parsers(sub: Any) -> None:
    b = sub.add_parser("backup", help="copy the embedded store, also while the server runs, to a new folder")
    b.add_argument("dest", type=Path, metavar="DEST", help="the backup folder to make (must not exist)")
    b.add_argument("--data-dir", type=Path, help="the data folder (default ./var, env TIDINGS_DATA_DIR)")
    b.add_argument("--config", type=Path, metavar="FILE", help="the TOML file 'tidings serve --config' is given "
                   "(for its data_dir and store)")
    r = sub.add_parser("restore", help="put a backup in a data folder as its store (the server stopped)")
    r.add_argument("src", type=Path, metavar="SRC", help="a folder made by 'tidings backup'")
    r.add_argument("--data-dir", type=Path, required=True, help="the data folder to restore into")
    r.add_argument("--force", action="store_true", help="replace the store the data folder holds (not a live one)")
    c = sub.add_parser("config", help="the effective configuration")
    csub = c.add_subparsers(dest="action", required=True)
    show = csub.add_parser("show", help="print every setting, its value and where it comes from (secrets masked)")
    show.add_argument("--config", type=Path, metavar="FILE", help="the TOML file 'tidings serve --config' is given")


def _embedded(settings: Settings) -> None:
    if settings.store:
        raise BackupError(
            "the store is on PostgreSQL (TIDINGS_STORE): back it up with pg_dump and restore it with pg_restore "
            "(docs/operations.md, 'Backup and restore')"
        )


def run_backup(args: argparse.Namespace) -> int:
    from .store.backup import backup, throttled_progress

    settings, _ = Settings.load(args.config, data_dir=args.data_dir)
    _embedded(settings)
    progress = throttled_progress(1.0, lambda line: print(f"tidings backup: {line}", file=sys.stderr, flush=True))
    done = backup(settings.data_dir, args.dest, progress)
    print(f"backed up {settings.db_path} to {done.path}: {done.bytes} bytes, schema version {done.schema_version}, "
          f"events up to seq {done.last_seq} in {len(done.namespaces)} publication(s)")
    return 0


def run_restore(args: argparse.Namespace) -> int:
    from .store.backup import restore

    settings = Settings.from_env(data_dir=args.data_dir)
    _embedded(settings)
    manifest = restore(args.src, settings.data_dir, force=args.force)
    print(f"restored {args.src} ({manifest.get('created_at')}, events up to seq {manifest.get('last_seq')}) "
          f"into {settings.db_path}")
    return 0


def run_config(args: argparse.Namespace) -> int:
    """Print the settings ``serve --config FILE`` would run with, as TOML it would take
    back, each with its source; secrets masked."""
    from .core.addresses import redact_address

    settings, sources = Settings.load(args.config)
    secret = Settings.secret_fields()
    print("# tidings settings: value, and where it comes from (file, env, or default)")
    for f in fields(settings):
        value: Any = getattr(settings, f.name)
        source = sources.get(f.name, "default")
        if f.name in secret and value:
            # The address without its password, anything else not at all.
            value = redact_address(value) if f.name == "store" else "***"
            source += ", masked"
        print(f"{f.name} = {_toml(value)}  # {source}")
    return 0


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return toml_string(str(value))


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string. Not ``json.dumps``: JSON writes characters past
    U+FFFF as surrogate pairs, which TOML refuses, and leaves DEL raw, which TOML forbids."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'
