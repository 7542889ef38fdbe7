"""The ``tidings`` command.

::

    tidings serve [--config FILE] [--host H] [--port P] [--data-dir D]
    tidings backup DEST [--data-dir D] [--config FILE]
    tidings restore SRC --data-dir D [--force]
    tidings config show [--config FILE]
    tidings principal create NAME [--admin] [--data-dir D]
    tidings principal token NAME [--data-dir D]
    tidings principal list [--data-dir D]
    tidings principal revoke NAME [--token TOKEN] [--data-dir D]
    tidings dead-letters list|redrive|drop ...
    tidings distributor serve|reconcile --config FILE ... (see interchain/cli.py)
    tidings schema register|get|list|versions|deprecate|retract|delete|retention|... (see _cli_schema)
    tidings replay register|cancel|status|list|fund|credit ... (see _cli_replay)
    tidings pipeline archive|expire|compact|vacuum|stats ... (see pipeline/cli.py)
    tidings archive [compact|expire|vacuum] ... (the same archive actions)
    tidings asyncapi [--url U] [--token T]   (the AsyncAPI 3.0 document, docs/asyncapi.md)
    tidings publish NAMESPACE [DATA] [--file F] [--header K=V] ... (see _cli_publish)
    tidings tail NAMESPACE|PATTERN [--from ID] [--filter F] [--skip M[,O]] [--json] (see _cli_tail)
    tidings ls publications|subscriptions|broadcasters|schemas|replays|principals [--json]
    tidings stats NAMESPACE [--json]
    tidings profile add|ls|show|use|rm ...   (named url and token, see _cli_profiles)
    tidings completion bash|zsh

Commands through the API take ``--url``, ``--token``, ``--profile`` (docs/cli.md).

``principal`` commands work on the embedded store directly (also while the server
runs), so the first tokens can be made before any exists.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from . import __version__
from ._cli_completion import add_completion_parser, run_completion
from ._cli_ops import add_ops_parsers, run_backup, run_config, run_restore
from ._cli_parsers import add_ls_parsers, add_publish_parser, add_tail_parser
from ._cli_profiles import add_api_options, add_profile_parser, resolve, run_profile
from ._cli_replay import add_replay_parser, run_replay
from ._cli_schema import add_schema_parser, run_schema
from .errors import TidingsError
from .interchain.cli import add_distributor_parser, run_distributor
from .pipeline.cli import add_archive_parser, add_pipeline_parser, run_archive, run_pipeline
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
    serve.add_argument("--store", help="postgresql://user@host:port/database to use PostgreSQL instead of the "
                       "SQLite file in the data folder (env TIDINGS_STORE)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                       help="default info (env TIDINGS_LOG_LEVEL)")
    serve.add_argument("--config", type=Path, metavar="FILE",
                       help="a TOML file of settings (names as in the environment, without TIDINGS_, in lower case); "
                            "the environment overrides it")

    add_ops_parsers(sub)

    pr = sub.add_parser("principal", help="create principals and tokens")
    psub = pr.add_subparsers(dest="action", required=True)
    create = psub.add_parser("create", help="create a principal and print its token")
    create.add_argument("name")
    create.add_argument("--admin", action="store_true", help="may create principals and administer")
    create.add_argument("--data-dir", type=Path)
    create.add_argument("--store", help="the store's address, as for serve (env TIDINGS_STORE)")
    token = psub.add_parser("token", help="issue a further token for an existing principal")
    token.add_argument("name")
    token.add_argument("--data-dir", type=Path)
    token.add_argument("--store", help="the store's address, as for serve (env TIDINGS_STORE)")
    revoke = psub.add_parser("revoke", help="revoke a principal's tokens (all, or one with --token); "
                             "a running server stops accepting them within seconds")
    revoke.add_argument("name")
    revoke.add_argument("--token", help="revoke only this token (read from TIDINGS_REVOKE_TOKEN if '-')")
    revoke.add_argument("--data-dir", type=Path)
    revoke.add_argument("--store", help="the store's address, as for serve (env TIDINGS_STORE)")
    lst = psub.add_parser("list", help="list principals")
    lst.add_argument("--data-dir", type=Path)
    lst.add_argument("--store", help="the store's address, as for serve (env TIDINGS_STORE)")

    dl = sub.add_parser("dead-letters", help="list, redrive or drop dead letters (through the API)")
    _api_options(dl)
    # The same options after the action (``dead-letters redrive 7 --url U``); SUPPRESS
    # keeps those given before it when they are not repeated.
    after = argparse.ArgumentParser(add_help=False)
    after.add_argument("--url", default=argparse.SUPPRESS, help="the service (env TIDINGS_URL)")
    after.add_argument("--token", default=argparse.SUPPRESS, help="bearer token (env TIDINGS_TOKEN)")
    after.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS)
    dsub = dl.add_subparsers(dest="action", required=True)
    dls = dsub.add_parser("list", help="list dead letters", parents=[after])
    dls.add_argument("--subscription", type=int)
    dls.add_argument("--take", type=int)
    for name, help_ in (("redrive", "send dead letters again"), ("drop", "delete dead letters for good")):
        d = dsub.add_parser(name, help=help_, parents=[after])
        d.add_argument("ids", type=int, nargs="+")

    aa = sub.add_parser("asyncapi", help="print the AsyncAPI 3.0 document of what the token's principal may "
                        "publish to and receive (GET /asyncapi.json)")
    _api_options(aa)

    schema_common = argparse.ArgumentParser(add_help=False)
    schema_common.add_argument("--url", default=argparse.SUPPRESS, help="the service (env TIDINGS_URL)")
    schema_common.add_argument("--token", default=argparse.SUPPRESS, help="bearer token (env TIDINGS_TOKEN)")
    schema_common.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS)
    add_schema_parser(sub, schema_common)
    add_replay_parser(sub, schema_common)
    add_distributor_parser(sub)
    add_pipeline_parser(sub)
    add_archive_parser(sub)
    api = argparse.ArgumentParser(add_help=False)
    add_api_options(api)
    add_publish_parser(sub, api)
    add_tail_parser(sub, api)
    add_ls_parsers(sub, api)
    add_profile_parser(sub)
    add_completion_parser(sub)
    return p


def _through_api(command: str) -> Any:
    """The command's runner, imported now: the SDK (aiohttp) only for these commands."""
    if command == "publish":
        from ._cli_publish import run_publish

        return run_publish
    if command == "tail":
        from ._cli_tail import run_tail

        return run_tail
    from ._cli_ls import run_ls, run_stats

    return run_ls if command == "ls" else run_stats


def _api_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=os.environ.get("TIDINGS_URL", "http://127.0.0.1:8072"),
                   help="the service (env TIDINGS_URL)")
    p.add_argument("--token", default=os.environ.get("TIDINGS_TOKEN"),
                   help="bearer token (env TIDINGS_TOKEN; default: the admin token in --data-dir)")
    p.add_argument("--data-dir", type=Path)


def _api_token(args: argparse.Namespace) -> str | None:
    token: str | None = getattr(args, "token", None) or os.environ.get("TIDINGS_TOKEN")
    if token is None:
        path = Settings.from_env(data_dir=getattr(args, "data_dir", None)).data_dir / "admin.token"
        if path.exists():
            token = path.read_text().strip()
    if token is None:
        print("tidings: give --token (or TIDINGS_TOKEN)", file=sys.stderr)
    return token


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command in ("publish", "tail", "ls", "stats"):
        from ._cli_api import fail

        try:
            target = resolve(args)
            return asyncio.run(_through_api(args.command)(args, target))
        except TidingsError as e:
            return fail(e)
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:  # the reader of stdout went away (`| head`): stop quietly, as cat does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    try:
        if args.command == "profile":
            return run_profile(args)
        if args.command == "completion":
            return run_completion(args, parser)
        if args.command == "serve":
            return _serve(args)
        if args.command == "backup":
            return run_backup(args)
        if args.command == "restore":
            return run_restore(args)
        if args.command == "config":
            return run_config(args)
        if args.command == "distributor":
            return run_distributor(args)
        if args.command == "pipeline":
            return run_pipeline(args)
        if args.command == "archive":
            return run_archive(args)
        if args.command == "dead-letters":
            return asyncio.run(_dead_letters(args))
        if args.command == "asyncapi":
            return asyncio.run(_asyncapi(args))
        if args.command == "schema":
            token = _api_token(args)
            if token is None:
                return 2
            url = getattr(args, "url", None) or os.environ.get("TIDINGS_URL", "http://127.0.0.1:8072")
            return asyncio.run(run_schema(args, url, token))
        if args.command == "replay":
            token = _api_token(args)
            if token is None:
                return 2
            url = getattr(args, "url", None) or os.environ.get("TIDINGS_URL", "http://127.0.0.1:8072")
            return asyncio.run(run_replay(args, url, token))
        return asyncio.run(_principal(args))
    except TidingsError as e:
        print(f"tidings: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _serve(args: argparse.Namespace) -> int:
    from .logs import configure
    from .server import serve

    settings, _ = Settings.load(args.config, host=args.host, port=args.port, data_dir=args.data_dir,
                                store=args.store, log_level=args.log_level)
    configure(settings.log_level, settings.log_format)
    return serve(settings)


async def _principal(args: argparse.Namespace) -> int:
    from .broker.auth import Authenticator
    from .store import store_for

    settings = Settings.from_env(data_dir=args.data_dir, store=getattr(args, "store", None))
    store = store_for(settings.store, settings.db_path, timeout_s=settings.store_timeout_s)
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
        elif args.action == "revoke":
            token = os.environ.get("TIDINGS_REVOKE_TOKEN") if args.token == "-" else args.token
            n = await auth.revoke(args.name, token)
            print(f"revoked {n} token(s) of {args.name!r}")
            if n == 0:
                return 1
        else:
            for p in await store.list_principals():
                print(f"{p.name}{'  (admin)' if p.admin else ''}")
    finally:
        await store.close()
    return 0


async def _dead_letters(args: argparse.Namespace) -> int:
    from .client import Subscriber

    token = _api_token(args)
    if token is None:
        return 2
    client = Subscriber(lambda n: None, url=args.url, token=token)
    try:
        if args.action == "list":
            letters = await client.dead_letters(args.subscription, take=args.take)
            print(f"{'id':>8} {'sub':>5} {'attempts':>8}  namespace/eventId  reason")
            for d in letters:
                print(f"{d.id:>8} {d.subscription:>5} {d.attempts:>8}  {d.namespace}/{d.eventId}  {d.reason}")
            print(f"{len(letters)} dead letter(s)")
            return 0
        call = client.redrive if args.action == "redrive" else client.drop_dead_letters
        failed = 0
        for i, r in zip(args.ids, await call(args.ids), strict=True):
            if r is not None and r.Ok is not msgspec.UNSET:
                print(f"{i}: ok")
            else:
                failed += 1
                print(f"{i}: {r.Err if r is not None else 'not processed'}")
        return 1 if failed else 0
    finally:
        await client.close()


async def _asyncapi(args: argparse.Namespace) -> int:
    import aiohttp

    token = _api_token(args)
    if token is None:
        return 2
    async with aiohttp.ClientSession() as http, http.get(
        args.url.rstrip("/") + "/asyncapi.json", headers={"authorization": f"Bearer {token}"}
    ) as resp:
        body = await resp.read()
    if resp.status != 200:
        print(f"tidings: {resp.status}: {body.decode(errors='replace')}", file=sys.stderr)
        return 1
    print(msgspec.json.format(body, indent=2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
