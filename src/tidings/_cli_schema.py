"""``tidings schema ...``: the schema registry from the command line, through the API.

::

    tidings schema register FILE|- [--format JSON|AVRO|PROTOBUF] [--name N] [--replaces ID]
    tidings schema get ID | list [--name N] [--state S] | versions NAME | history [ID]
    tidings schema deprecate ID... [--until TIME] | retract ID... | activate ID... | delete ID...
    tidings schema retention ID [SECONDS|forever]
    tidings schema compatibility NAME [MODE|default] | check NAME FILE [--format F]
    tidings schema limits [--max-count N] [--min-size N] [--max-size N] [--default-compatibility M]
                          [--open | --closed] [--registrar P ...]
    tidings schema trim
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path
from typing import Any

import msgspec

from .errors import TidingsError

__all__ = ["add_schema_parser", "run_schema"]


def add_schema_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    sc = sub.add_parser("schema", help="register and govern schemas (through the API)", parents=[common])
    ssub = sc.add_subparsers(dest="action", required=True)
    reg = ssub.add_parser("register", help="register a schema from a file ('-': stdin)", parents=[common])
    reg.add_argument("file")
    reg.add_argument("--format", default="JSON", help="JSON (JSON Schema, the default), AVRO or PROTOBUF")
    reg.add_argument("--name", help="register as the next version of this name (protocol.descriptor)")
    reg.add_argument("--replaces", type=int, help="the id of the schema this one replaces")
    ssub.add_parser("get", help="show a schema", parents=[common]).add_argument("id", type=int)
    lst = ssub.add_parser("list", help="list schemas", parents=[common])
    lst.add_argument("--name")
    lst.add_argument("--state", choices=["Active", "Deprecated", "Retracted"])
    lst.add_argument("--prev", type=int)
    lst.add_argument("--take", type=int)
    ssub.add_parser("versions", help="the versions of a name", parents=[common]).add_argument("name")
    ssub.add_parser("history", help="who changed what, when", parents=[common]).add_argument(
        "id", type=int, nargs="?")
    dep = ssub.add_parser("deprecate", help="deprecate schemas (admin)", parents=[common])
    dep.add_argument("ids", type=int, nargs="+")
    dep.add_argument("--until", help="end of the validity window: ISO 8601 time or UTC nanoseconds")
    for name, help_ in (("retract", "retract schemas (admin)"), ("activate", "make schemas Active again (admin)"),
                        ("delete", "delete schemas (admin)")):
        ssub.add_parser(name, help=help_, parents=[common]).add_argument("ids", type=int, nargs="+")
    ret = ssub.add_parser("retention", help="show or set (admin) how long events are kept", parents=[common])
    ret.add_argument("id", type=int)
    ret.add_argument("seconds", nargs="?", help="seconds, or 'forever'")
    comp = ssub.add_parser("compatibility", help="show or set (admin) a name's mode", parents=[common])
    comp.add_argument("name")
    comp.add_argument("mode", nargs="?", help="NONE, BACKWARD, FORWARD, FULL, *_TRANSITIVE, or 'default'")
    chk = ssub.add_parser("check", help="would a model pass as the next version of a name?", parents=[common])
    chk.add_argument("name")
    chk.add_argument("file")
    chk.add_argument("--format", default="JSON")
    lim = ssub.add_parser("limits", help="show or change (admin) the registry's limits", parents=[common])
    lim.add_argument("--max-count", type=int)
    lim.add_argument("--min-size", type=int)
    lim.add_argument("--max-size", type=int)
    lim.add_argument("--default-compatibility")
    lim.add_argument("--open", dest="open_registration", action="store_const", const=True)
    lim.add_argument("--closed", dest="open_registration", action="store_const", const=False)
    lim.add_argument("--registrar", action="append", dest="registrars")
    ssub.add_parser("trim", help="trim events past retention now (admin)", parents=[common])


def _read(path: str) -> str:
    return sys.stdin.read() if path == "-" else Path(path).read_text()


def _time_ns(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        t = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise TidingsError(f"--until {text!r}: give an ISO 8601 time or UTC nanoseconds") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.UTC)
    return int(t.timestamp() * 1_000_000_000)


def _show(value: Any) -> None:
    print(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())


async def run_schema(args: argparse.Namespace, url: str, token: str) -> int:
    from .client import Schemas

    reg = Schemas(url, token)
    try:
        return await _dispatch(reg, args)
    finally:
        await reg.close()


async def _dispatch(reg: Any, args: argparse.Namespace) -> int:
    a = args.action
    if a == "register":
        r = await reg.register(_read(args.file), format=args.format, name=args.name, replaces=args.replaces)
        where = f" ({r.name} version {r.version})" if r.name else ""
        print(f"{r.id}{where}{' (already registered)' if r.duplicate else ''}")
    elif a == "get":
        info = await reg.get(args.id)
        if info is None:
            print(f"tidings: no schema {args.id}", file=sys.stderr)
            return 1
        _show(info)
    elif a == "list":
        found = await reg.list(prev=args.prev, take=args.take, name=args.name, state=args.state)
        for s in found:
            names = ", ".join(f"{v.name} v{v.version}" for v in s.versions)
            print(f"{s.id:>6}  {s.format:<5} {s.validity.state:<10} {names}")
        print(f"{len(found)} schema(s)")
    elif a == "versions":
        for v in await reg.versions(args.name):
            print(f"{v.name} v{v.version}: schema {v.id}")
    elif a == "history":
        for c in await reg.history(args.id):
            at = datetime.datetime.fromtimestamp(c.at / 1e9, datetime.UTC).isoformat()
            print(f"{c.seq:>6} {at} {c.by:<16} {c.action:<18} schema={c.schema_id} {c.detail}")
    elif a == "deprecate":
        await reg.deprecate(args.ids, valid_to=None if args.until is None else _time_ns(args.until))
        print(f"deprecated {len(args.ids)} schema(s)")
    elif a in ("retract", "activate", "delete"):
        await getattr(reg, a)(args.ids)
        print(f"{a.removesuffix('e')}ed {len(args.ids)} schema(s)")
    elif a == "retention":
        if args.seconds is not None:
            await reg.set_retention(args.id, None if args.seconds == "forever" else int(args.seconds))
        _show(await reg.retention(args.id))
    elif a == "compatibility":
        if args.mode is not None:
            await reg.set_compatibility(args.name, None if args.mode == "default" else args.mode)
        print(await reg.compatibility(args.name))
    elif a == "check":
        issues = await reg.check_compatibility(args.name, _read(args.file), format=args.format)
        for i in issues:
            print(f"incompatible with version {i.version}: {i.path}: {i.rule}: {i.message}")
        print("compatible" if not issues else f"{len(issues)} incompatibilit(ies)")
        return 1 if issues else 0
    elif a == "limits":
        changes = {k: getattr(args, k) for k in ("max_count", "min_size", "max_size", "default_compatibility",
                                                  "open_registration", "registrars") if getattr(args, k) is not None}
        _show(await reg.update_limits(**changes) if changes else await reg.limits())
    elif a == "trim":
        _show(await reg.apply_retention())
    return 0
