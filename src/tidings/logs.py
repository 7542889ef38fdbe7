"""Log lines, for the broker and its front processes: text for people or JSON lines
(``TIDINGS_LOG_FORMAT=json``), and in both, credentials scrubbed from every line.

A JSON line is one object with these fields, whose names and meanings are stable
(docs/operations.md, "Logs"): ``time`` (UTC, ISO 8601 with milliseconds), ``level``
(``debug``, ``info``, ``warning``, ``error``, ``critical``), ``logger`` (``tidings.cluster``,
``tidings.store``, ...), ``message``, ``process`` (``broker`` or ``front``), ``pid``, and
``exception`` (the traceback) when there is one. Fields may be added; none is renamed.

Nothing tidings logs on purpose holds a credential (tokens are stored hashed, secrets and
passwords are kept out of reprs), and the scrub is the net under that: whatever a line
holds that has the shape of a bearer token (``tid_...``), a signing secret
(``whsec_...``), an ``Authorization`` value or a password in a URL is replaced by
``***`` before it is written, including in tracebacks and in the messages of libraries.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from typing import Final

__all__ = ["FIELDS", "JsonFormatter", "TextFormatter", "announce", "configure", "scrub"]

FIELDS: Final = ("time", "level", "logger", "message", "process", "pid", "exception")

_SECRETS: Final = (
    (re.compile(r"\btid_[A-Za-z0-9_\-]{8,}"), "tid_***"),
    (re.compile(r"\bwhsec_[A-Za-z0-9+/=]{8,}"), "whsec_***"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}"), r"\1 ***"),
    # user:password@ in any URL (postgresql://, amqp://, http://)
    (re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@]*:)[^\s@/]+@"), r"\1***@"),
    (re.compile(r"(?i)\b(password|secret|token)=([^\s&;,]+)"), r"\1=***"),
)


def scrub(text: str) -> str:
    """``text`` with whatever has the shape of a credential replaced (see the module)."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


class JsonFormatter(logging.Formatter):
    def __init__(self, process: str) -> None:
        super().__init__()
        self._process = process

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": _utc(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": scrub(record.getMessage()),
            "process": self._process,
            "pid": record.process or os.getpid(),
        }
        if record.exc_info:
            line["exception"] = scrub(self.formatException(record.exc_info))
        elif record.exc_text:
            line["exception"] = scrub(record.exc_text)
        return json.dumps(line, ensure_ascii=False)


def _utc(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created * 1000) % 1000:03d}Z"


_format = "text"
_process = "broker"


class _DriverRetries(logging.Filter):
    """asyncpg's pool logs a warning with the driver's traceback each time it fails to
    reconnect its minimum of connections: during a database restart, several per member.
    The outage is tidings' to report, once per episode (``tidings.api``: "the store is
    unavailable ... available again after"), so these become one DEBUG line each,
    without the traceback, under ``tidings.store``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            return True
        why = record.exc_info[1] if record.exc_info else None
        logging.getLogger("tidings.store").debug(
            "the driver's pool: %s%s", record.getMessage(), f" ({type(why).__name__}: {why})" if why else ""
        )
        return False


def configure(level: str, fmt: str, process: str = "broker") -> None:
    """Log to stderr at ``level`` in ``fmt`` (``text`` or ``json``), replacing any handler."""
    global _format, _process
    _format, _process = fmt, process
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(process) if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    pool = logging.getLogger("asyncpg.pool")
    if not any(isinstance(f, _DriverRetries) for f in pool.filters):
        pool.addFilter(_DriverRetries())


def announce(text: str, *, error: bool = False) -> None:
    """A line the server prints whatever the log level (where it listens, where the admin
    token is; with ``error``, why it cannot start, on stderr): as it is in text format, as
    a JSON line (logger ``tidings.server``) in JSON format, so that a log shipper reads
    every line."""
    out = sys.stderr if error else sys.stdout
    if _format != "json":
        print(scrub(text), file=out, flush=True)
        return
    now = time.time()
    print(json.dumps({
        "time": _utc(now), "level": "error" if error else "info", "logger": "tidings.server", "message": scrub(text),
        "process": _process, "pid": os.getpid(),
    }, ensure_ascii=False), file=out, flush=True)
