"""The ``tidings`` command.

::

    tidings serve [--host H] [--port P] [--data-dir D]
    tidings principal create NAME [--admin] [--data-dir D]
    tidings principal token NAME [--data-dir D]
    tidings principal list [--data-dir D]

``principal`` commands work on the embedded store directly (also while the server
runs), so the first tokens can be made before any exists.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .errors import TidingsError
from .settings import Settings

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tidings", description="tidings event distribution service")
    p.add_argument("--version", action="version", version=f"tidings {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the service (HTTP API, broker, delivery)")
    serve.add_argument("--host", help="listen address (default 127.0.0.1, env TIDINGS_HOST)")
    serve.add_argument("--port", type=int, help="listen port (default 8072, env TIDINGS_PORT; 0 picks one)")
    serve.add_argument("--data-dir", type=Path, help="store folder (default ./var, env TIDINGS_DATA_DIR)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    pr = sub.add_parser("principal", help="create principals and tokens")
    psub = pr.add_subparsers(dest="action", required=True)
    create = psub.add_parser("create", help="create a principal and print its token")
    create.add_argument("name")
    create.add_argument("--admin", action="store_true", help="may create principals and administer")
    create.add_argument("--data-dir", type=Path)
    token = psub.add_parser("token", help="issue a further token for an existing principal")
    token.add_argument("name")
    token.add_argument("--data-dir", type=Path)
    lst = psub.add_parser("list", help="list principals")
    lst.add_argument("--data-dir", type=Path)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        return asyncio.run(_principal(args))
    except TidingsError as e:
        print(f"tidings: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _serve(args: argparse.Namespace) -> int:
    from .server import serve

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings.from_env(host=args.host, port=args.port, data_dir=args.data_dir)
    return serve(settings)


async def _principal(args: argparse.Namespace) -> int:
    from .broker.auth import Authenticator
    from .store import SQLiteStore

    settings = Settings.from_env(data_dir=args.data_dir)
    store = SQLiteStore(settings.db_path)
    await store.open()
    try:
        auth = Authenticator(store)
        if args.action == "create":
            token = await auth.create(args.name, admin=args.admin)
            if token is None:
                print(f"tidings: principal {args.name!r} already exists; "
                      f"'tidings principal token {args.name}' issues another token", file=sys.stderr)
                return 1
            print(token)
        elif args.action == "token":
            token = await auth.issue(args.name)
            if token is None:
                print(f"tidings: no principal {args.name!r}", file=sys.stderr)
                return 1
            print(token)
        else:
            for p in await store.list_principals():
                print(f"{p.name}{'  (admin)' if p.admin else ''}")
    finally:
        await store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
