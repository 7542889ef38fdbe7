"""``python -m bench.chaos``: N broadcasters, a primary PostgreSQL with a synchronous
standby (both throwaway clusters of their own), publishers and subscribers, and a schedule
of faults; a table of each fault's figures against its bound, then the checks.

    .venv/bin/python -m bench.chaos                       # a short schedule: one of each kind
    .venv/bin/python -m bench.chaos --faults 100 --min-seconds 600 --seed 7 --json chaos.json

Exits 1 when any check or bound fails. Needs root or the ``postgres`` user (initdb) and
the PostgreSQL server programs (``/usr/lib/postgresql/*/bin``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from .run import KINDS, Chaos, Fault, FaultResult, random_schedule


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--faults", type=int, default=0, help="random faults (default: one of each kind)")
    ap.add_argument("--min-seconds", type=float, default=0, help="keep drawing faults until this long has passed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--between", type=float, default=2.0, help="seconds between two faults")
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args()
    if args.faults:
        schedule = random_schedule(args.faults, args.seed, args.members)
    else:
        schedule = [Fault(k, 15.0 if k == "pause" else 4.0, i % args.members) for i, k in enumerate(KINDS)]
    started = time.monotonic()

    def shown(r: FaultResult) -> None:
        take = "" if r.takeover_s is None else f", takeover {r.takeover_s:.2f} s (bound {r.takeover_bound_s:.1f})"
        if r.kept_gap_s is not None:
            take += f", the others' subscriptions without a push at most {r.kept_gap_s:.2f} s"
        print(f"[{time.monotonic() - started:7.1f} s] {r.kind} {r.target} for {r.duration_s:.1f} s: "
              f"publish gap {r.publish_gap_s:.2f} s (bound {r.publish_bound_s:.1f}){take}"
              f"{' aimed' if r.aimed else ''} {'ok' if r.ok else 'OVER BOUND'}", flush=True)

    if args.min_seconds:
        # About ten seconds a fault with the pauses between: enough to last that long.
        need = int(args.min_seconds / 8) + 1
        if len(schedule) < need:
            schedule += random_schedule(need - len(schedule), args.seed + 1000, args.members)

    async def go() -> int:
        async with Chaos(args.members) as chaos:
            report = await chaos.run(schedule, between_s=args.between, on_fault=shown)
            if not report.ok:
                print("missing per subscription:", {s: n for s, n in chaos.missing.items() if n})
        print("\n".join(report.lines()))
        print(f"{len(report.faults)} faults in {time.monotonic() - started:.0f} s")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report.as_dict(), f, indent=1)
        return 0 if report.ok else 1

    sys.exit(asyncio.run(go()))


if __name__ == "__main__":
    main()
