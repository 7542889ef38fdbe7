"""``tidings replay ...``: ICRC-77 replays from the command line, through the API.

::

    tidings replay register NAMESPACE FROM [TO] [--filter F] [--skip MOD[,OFFSET]] [--subscription ID]
    tidings replay cancel ID...
    tidings replay status ID
    tidings replay list [--namespace NS] [--state S] [--requester P] [--prev ID] [--take N]
    tidings replay fund PRINCIPAL AMOUNT      (admin)
    tidings replay credit PRINCIPAL
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from .core.replay import STATES

__all__ = ["add_replay_parser", "run_replay"]


def add_replay_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    rp = sub.add_parser("replay", help="replay ranges of events (ICRC-77, through the API)", parents=[common])
    rsub = rp.add_subparsers(dest="action", required=True)
    reg = rsub.add_parser("register", help="replay [FROM, TO) of a namespace to your subscription",
                          parents=[common])
    reg.add_argument("namespace")
    reg.add_argument("start", type=int, metavar="FROM")
    reg.add_argument("end", type=int, nargs="?", metavar="TO", help="exclusive; default: up to the last event now")
    reg.add_argument("--filter", help="filter text (default: the subscription's)")
    reg.add_argument("--skip", help="MOD or MOD,OFFSET (default: the subscription's)")
    reg.add_argument("--subscription", type=int, help="which of your subscriptions receives it")
    rsub.add_parser("cancel", help="stop replays", parents=[common]).add_argument("ids", type=int, nargs="+")
    rsub.add_parser("status", help="show a replay", parents=[common]).add_argument("id", type=int)
    lst = rsub.add_parser("list", help="list replays", parents=[common])
    lst.add_argument("--namespace")
    lst.add_argument("--state", choices=STATES)
    lst.add_argument("--requester")
    lst.add_argument("--prev", type=int)
    lst.add_argument("--take", type=int)
    fund = rsub.add_parser("fund", help="add replay credit to a principal (admin)", parents=[common])
    fund.add_argument("principal")
    fund.add_argument("amount", type=int)
    rsub.add_parser("credit", help="a principal's replay credit", parents=[common]).add_argument("principal")


def _skip(text: str | None) -> int | tuple[int, int] | None:
    if text is None:
        return None
    parts = [int(p) for p in text.split(",")]
    return parts[0] if len(parts) == 1 else (parts[0], parts[1])


def _show(value: Any) -> None:
    print(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())


async def run_replay(args: argparse.Namespace, url: str, token: str) -> int:
    from .client import Replays

    client = Replays(url, token)
    try:
        a = args.action
        if a == "register":
            print(await client.register(
                args.namespace, args.start, args.end, filter=args.filter, skip=_skip(args.skip),
                subscription=args.subscription,
            ))
        elif a == "cancel":
            await client.cancel(*args.ids)
            print(f"canceled {len(args.ids)} replay(s)")
        elif a == "status":
            status = await client.status(args.id)
            if status is None:
                print(f"tidings: no replay {args.id}", file=sys.stderr)
                return 1
            _show(status)
        elif a == "list":
            found = await client.list(prev=args.prev, take=args.take, namespace=args.namespace, state=args.state,
                                      requester=args.requester)
            for s in found:
                stats = {k: v.get("Nat") for k, v in s.stats}
                state = s.status.name
                print(f"{s.replayId:>6}  {s.namespace}  [{s.range[0]}, {s.range[1]})  {state:<9} "
                      f"{stats.get('icrc77:replay:stats:sent')}/{stats.get('icrc77:replay:stats:expected')} sent")
            print(f"{len(found)} replay(s)")
        elif a == "fund":
            print(await client.fund(args.principal, args.amount))
        elif a == "credit":
            _show(await client.credit(args.principal))
        return 0
    finally:
        await client.close()
