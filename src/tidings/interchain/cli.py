"""``tidings distributor ...``: the Interchain Event Distributor from the command line.

::

    tidings distributor serve --config FILE [--port P] [--redis URL] [--log-level L]
    tidings distributor reconcile --config FILE [--redis URL] [--dry-run] [--json] [--master URL]

``reconcile`` prints the report (per network: events, missing, fixed, still missing;
the ids fixed) and exits 0 when every network had everything or was repaired and read
back, 1 otherwise (a network unread, or an event it still lacks after the repair).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

__all__ = ["add_distributor_parser", "run_distributor"]


def add_distributor_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "distributor", help="the Interchain Event Distributor (DLT Adapter API, replication)")
    sub = p.add_subparsers(dest="distributor_action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, required=True, help="the config file (TOML, or .json)")
    common.add_argument("--redis", help="Redis URL for the state (overrides the config)")
    s = sub.add_parser("serve", parents=[common], help="serve the DLT Adapter API and replicate")
    s.add_argument("--port", type=int, help="listen port (overrides the config)")
    s.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    r = sub.add_parser("reconcile", parents=[common], help="Spark job: find and repair what networks lack")
    r.add_argument("--dry-run", action="store_true", help="report the differences, repair nothing")
    r.add_argument("--json", action="store_true", help="print the report as JSON")
    r.add_argument("--master", help="Spark master (default local[*]; sc://... for Spark Connect)")
    return p


def run_distributor(args: argparse.Namespace) -> int:
    from .config import load

    if args.distributor_action == "serve":
        from .server import serve

        logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        asyncio.run(serve(load(args.config, port=args.port, redis=args.redis)))
        return 0
    from . import reconcile

    config = load(args.config, redis=args.redis)

    def spark() -> Any:
        from ..pipeline.session import build

        return build(args.master, app_name="tidings-reconcile")

    report = asyncio.run(reconcile.run(config, spark, repair=not args.dry_run))
    print(json.dumps(dataclasses.asdict(report), indent=2) if args.json else report.text())
    return 0 if report.ok else 1
