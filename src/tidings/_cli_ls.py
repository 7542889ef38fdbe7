"""``tidings ls KIND`` and ``tidings stats NAMESPACE``: what the service holds, as a
table for people or ``--json`` (one object per line) for scripts.

Every list is read page by page through the API's own paging (``prev`` the last key of
the page before, ``take`` the page size), so a long one is printed as it comes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec

from ._cli_api import explain, say, status_of
from ._cli_profiles import Target
from .client import Admin, ClientError, Replays, Schemas, to_python

__all__ = ["run_ls", "run_stats"]

_encode = msgspec.json.Encoder(enc_hook=repr).encode


def _stats(pairs: list[Any]) -> dict[str, Any]:
    return {k: to_python(v) for k, v in pairs}


def _short(stats: dict[str, Any], *keys: str) -> str:
    return " ".join(f"{k.rsplit(':', 1)[-1]}={stats[k]}" for k in keys if k in stats)


async def _pages(fetch: Callable[[Any], Awaitable[list[Any]]], key: Callable[[Any], Any]) -> AsyncIterator[Any]:
    prev = None
    while True:
        page = await fetch(prev)
        for item in page:
            yield item
        if not page:
            return
        nxt = key(page[-1])
        if nxt == prev:
            return
        prev = nxt


def _rows(kind: str, args: argparse.Namespace, admin: Admin, schemas: Schemas, replays: Replays,
          ) -> tuple[list[str], AsyncIterator[Any], Callable[[Any], dict[str, Any]]]:
    take = args.page
    if kind == "publications":
        return (["namespace", "stats"], _pages(lambda p: admin.get_publications(prev=p, take=take),
                                               lambda x: x.namespace),
                lambda x: {"namespace": x.namespace, "config": _stats(x.config), "stats": _stats(x.stats)})
    if kind == "subscriptions":
        return (["id", "subscriber", "namespace", "endpoint", "mode"],
                _pages(lambda p: admin.get_subscriptions(namespace=args.namespace, prev=p, take=take), lambda x: x.id),
                lambda x: {"id": x.id, "subscriber": x.subscriber, "namespace": x.namespace, "endpoint": x.endpoint,
                           "mode": x.mode, "config": _stats(x.config), "stats": _stats(x.stats)})
    if kind == "broadcasters":
        return (["broadcaster", "stats"], _pages(lambda p: admin.get_broadcasters(prev=p, take=take),
                                                 lambda x: x.broadcaster),
                lambda x: {"broadcaster": x.broadcaster, "stats": _stats(x.stats)})
    if kind == "schemas":
        return (["id", "format", "names", "state"], _pages(lambda p: schemas.list(prev=p, take=take), lambda x: x.id),
                lambda x: {"id": x.id, "format": x.format, "names": [f"{v.name}@{v.version}" for v in x.versions],
                           "state": msgspec.to_builtins(x.validity), "created_by": x.created_by})
    if kind == "replays":
        return (["replayId", "namespace", "range", "status", "subscription"],
                _pages(lambda p: replays.list(prev=p, take=take, namespace=args.namespace), lambda x: x.replayId),
                lambda x: {"replayId": x.replayId, "namespace": x.namespace, "range": list(x.range),
                           "status": msgspec.to_builtins(x.status), "requester": x.requester,
                           "subscription": x.subscription, "stats": _stats(x.stats)})
    return (["principal", "admin"], _principals(admin, take), lambda x: x)


async def _principals(admin: Admin, take: int) -> AsyncIterator[dict[str, Any]]:
    async for p in _pages(lambda prev: admin.get_principals(prev=prev, take=take), lambda x: x.name):
        yield {"principal": p.name, "admin": p.admin, "createdAt": p.createdAt}


def _cell(row: dict[str, Any], col: str) -> str:
    v = row.get(col)
    if col == "stats" and isinstance(v, dict):
        return _short(v, *[k for k in v if not k.endswith("Ms")][:4])
    if isinstance(v, dict | list):
        return _encode(v).decode()
    return "" if v is None else str(v)


async def run_ls(args: argparse.Namespace, target: Target) -> int:
    if not 1 <= args.page <= 10_000:
        say("tidings: --page is 1 to 10000")
        return 2
    admin = Admin(target.url, target.token)
    schemas = Schemas(target.url, target.token)
    replays = Replays(target.url, target.token)
    try:
        cols, items, shape = _rows(args.kind, args, admin, schemas, replays)
        header = "  ".join(c.upper() for c in cols)
        n = 0
        async for item in items:  # the header once the first page has come: an error is then one line
            row = shape(item)
            n += 1
            if args.json:
                sys.stdout.write(_encode(row).decode() + "\n")
            else:
                if n == 1:
                    print(header)
                print("  ".join(_cell(row, c) for c in cols))
        if not args.json:
            if n == 0:
                print(header)
            print(f"({n} {args.kind})")
        return 0
    except ClientError as e:
        say(f"tidings: {explain(e)}")
        return status_of(e)
    finally:
        for c in (admin, schemas, replays):
            await c.close()


async def run_stats(args: argparse.Namespace, target: Target) -> int:
    async with Admin(target.url, target.token) as admin:
        try:
            page = await admin.get_publications(prev=_before(args.namespace), take=1)
            if not page or page[0].namespace != args.namespace:
                say(f"tidings: namespace_not_found: no publication {args.namespace!r} "
                    "('tidings ls publications' lists them)")
                return 1
            subs = [x async for x in _pages(
                lambda p: admin.get_subscriptions(namespace=args.namespace, prev=p, take=100), lambda x: x.id)]
        except ClientError as e:
            say(f"tidings: {explain(e)}")
            return status_of(e)
    pub = _stats(page[0].stats)
    per_sub = {s.id: _stats(s.stats) for s in subs}
    if args.json:
        print(_encode({"namespace": args.namespace, "stats": pub,
                       "subscriptions": [{"id": k, "stats": v} for k, v in per_sub.items()]}).decode())
        return 0
    print(f"publication {args.namespace}")
    for k, v in sorted(pub.items()):
        print(f"  {k:50} {v}")
    for sid, st in per_sub.items():
        print(f"subscription {sid}")
        for k, v in sorted(st.items()):
            print(f"  {k:50} {v}")
    return 0


def _before(namespace: str) -> str | None:
    """A ``prev`` just before ``namespace`` in the order publications are paged in."""
    return namespace[:-1] + chr(ord(namespace[-1]) - 1) + "\U0010ffff" if namespace else None
