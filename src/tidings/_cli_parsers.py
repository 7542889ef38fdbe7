"""The arguments of ``tidings publish``, ``tail``, ``ls`` and ``stats`` (docs/cli.md).

Kept apart from the commands themselves, which import the SDK (and aiohttp): building the
parser stays cheap, so every other command (``serve``, ``principal``, ...) starts as fast
as before. ``cli.py`` imports a command's module only when it runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["KINDS", "add_ls_parsers", "add_publish_parser", "add_tail_parser"]

KINDS = ("publications", "subscriptions", "broadcasters", "schemas", "replays", "principals")

PUBLISH = """Publish DATA, or one event per line of --file or stdin (docs/cli.md).

DATA is plain JSON, converted to ICRC-16 as the SDK converts Python values, or with
--typed the ICRC-16 wire form. Lines are streamed in bounded memory; a line longer than
--max-line-bytes is refused by its number. Every event has an idempotency key (--key, or
one made for the run): a publish whose answer was lost is sent again with the same keys,
and a command that gave up says how to run it again safely. Exit status: 0 all
published, 1 some refused (each named by its line), 2 usage, token or connection."""

TAIL = """Print events as they are published, through a stream: subscription of the
command's own that it deletes when it ends and that the service ends by itself after
--lease seconds without a listener. --from ID replays from ID (ICRC-77), then continues
live with no gap and no repeat (docs/cli.md)."""


def add_publish_parser(sub: Any, api: argparse.ArgumentParser) -> None:
    p = sub.add_parser("publish", parents=[api], help="publish events: DATA, or one JSON per line of --file or stdin",
                       description=PUBLISH, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("namespace")
    p.add_argument("data", nargs="?", help="the event's data as JSON (without it: lines of --file, else stdin)")
    p.add_argument("--file", "-f", type=Path, help="one JSON per line ('-': stdin)")
    p.add_argument("--header", "-H", action="append", default=[], metavar="KEY=VALUE",
                   help="a header (Text) on every event; repeatable")
    p.add_argument("--typed", action="store_true", help="the data is ICRC-16 wire form, not plain JSON")
    p.add_argument("--key", "-k", metavar="KEY",
                   help="the idempotency key of DATA, or the run's key (line N's event is keyed KEY:N): "
                        "the same command run again with the same --key stores nothing twice (default: a new "
                        "key, printed when the outcome is unknown)")
    p.add_argument("--batch", type=int, default=1000, help="events per call (default 1000)")
    p.add_argument("--max-line-bytes", type=int, default=1024 * 1024,
                   help="a longer line is refused (default 1 MiB, the stream face's frame limit)")


def add_tail_parser(sub: Any, api: argparse.ArgumentParser) -> None:
    p = sub.add_parser("tail", parents=[api], help="print events as they are published (a subscription of its own)",
                       description=TAIL, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("namespace", help="a namespace, or a pattern (com.example.*)")
    p.add_argument("--from", dest="start", type=int, metavar="ID",
                   help="first replay the namespace's events from ID (ICRC-77), then continue live")
    p.add_argument("--filter", help="a filter (docs/filters.md), as for a subscription")
    p.add_argument("--skip", metavar="MOD[,OFFSET]", help="deliver only eventId %% MOD == OFFSET")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--typed", action="store_true", help="data in ICRC-16 wire form rather than plain JSON")
    p.add_argument("--count", "-n", type=int, help="stop after this many events")
    p.add_argument("--lease", type=float, default=10.0, metavar="SECONDS",
                   help="the subscription ends this long after the command is gone (default 10)")


def add_ls_parsers(sub: Any, api: argparse.ArgumentParser) -> None:
    ls = sub.add_parser("ls", parents=[api], help="list " + ", ".join(KINDS) + " (a table, or --json)")
    ls.add_argument("kind", choices=KINDS)
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    ls.add_argument("--page", type=int, default=100, help="items per call (default 100)")
    ls.add_argument("--namespace", help="subscriptions and replays: of this namespace only")
    st = sub.add_parser("stats", parents=[api], help="a publication's statistics and its subscriptions'")
    st.add_argument("namespace")
    st.add_argument("--json", action="store_true", help="one JSON object")
