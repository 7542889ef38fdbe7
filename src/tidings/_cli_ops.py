"""``tidings backup`` and ``tidings restore``: the embedded store copied while it runs, and put back.

::

    tidings backup DEST [--data-dir D]
    tidings restore SRC --data-dir D [--force]

On PostgreSQL the database's own tools do it (docs/operations.md, "Backup and restore").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .errors import BackupError
from .settings import Settings

__all__ = ["add_ops_parsers", "run_backup", "run_restore"]


def add_ops_parsers(sub: Any) -> None:
    b = sub.add_parser("backup", help="copy the embedded store, also while the server runs, to a new folder")
    b.add_argument("dest", type=Path, metavar="DEST", help="the backup folder to make (must not exist)")
    b.add_argument("--data-dir", type=Path, help="the data folder (default ./var, env TIDINGS_DATA_DIR)")
    r = sub.add_parser("restore", help="put a backup in a data folder as its store (the server stopped)")
    r.add_argument("src", type=Path, metavar="SRC", help="a folder made by 'tidings backup'")
    r.add_argument("--data-dir", type=Path, required=True, help="the data folder to restore into")
    r.add_argument("--force", action="store_true", help="replace the store the data folder holds (not a live one)")


def _embedded(settings: Settings) -> None:
    if settings.store:
        raise BackupError(
            "the store is on PostgreSQL (TIDINGS_STORE): back it up with pg_dump and restore it with pg_restore "
            "(docs/operations.md, 'Backup and restore')"
        )


def run_backup(args: argparse.Namespace) -> int:
    from .store.backup import backup, throttled_progress

    settings = Settings.from_env(data_dir=args.data_dir)
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
