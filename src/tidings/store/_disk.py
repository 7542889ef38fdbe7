"""Why a file of the embedded store cannot be opened or written, in words an operator acts on.

SQLite says ``unable to open database file`` or ``disk I/O error`` whatever the cause; the
operating system's error number, or a look at the folder, tells which: a read-only
filesystem, a missing folder, a permission refused, a full disk (docs/operations.md,
"Overload and a stalling store")."""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["cause"]

_BY_ERRNO = {
    errno.EROFS: "the filesystem is read-only",
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "the folder does not exist",
    errno.ENOTDIR: "a part of the path is not a folder",
}


def cause(path: str | Path, error: BaseException) -> str:
    """``error`` (an ``OSError`` or SQLite's) met at ``path``, said with its cause and the
    folder it concerns: ``<cause>: <folder> (<error>)``; the error alone when no cause is found."""
    p = Path(path)
    folder = p.parent if p.name else p
    why = _BY_ERRNO.get(getattr(error, "errno", None) or -1)
    if why is None:
        why = _look(folder, str(error))
    if why is None:
        return str(error)
    if why == "permission denied":
        why += _owner(folder)
    return f"{why}: {folder} ({error})"


def _look(folder: Path, message: str) -> str | None:
    """What the folder shows, for an error that carries no number (SQLite's)."""
    if "full" in message:  # SQLITE_FULL: "database or disk is full"
        return "the disk is full"
    if not folder.exists():
        return "the folder does not exist"
    if not folder.is_dir():
        return "a part of the path is not a folder"
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return "the filesystem is read-only"
    if not os.access(folder, os.W_OK | os.X_OK):
        return "permission denied"
    if st.f_bavail == 0:
        return "the disk is full"
    return None


def _owner(folder: Path) -> str:
    try:
        st = folder.stat()
    except OSError:
        return ""
    return (f" (the folder is owner uid {st.st_uid}, mode {st.st_mode & 0o777:o}; "
            f"this process runs as uid {os.getuid()})")
