"""``tidings publish NAMESPACE [DATA]``: one event, or one per line of a file or stdin.

DATA is plain JSON, converted to ICRC-16 as the SDK converts Python values
(``from_python``: an integer is a Nat, or an Int when negative; a string Text; an object
a Map; an array an Array; null Option(null)), or with ``--typed`` the ICRC-16 wire form
itself (``{"Map": [["total", {"Nat": 17}]]}``).

Lines are read as a stream: at most two batches are held at once, whatever the input's
length, and a line longer than ``--max-line-bytes`` is refused by its number and skipped
without being held. Each batch goes through the SDK's ``Publisher.publish_batch`` (its
idempotency keys and safe retries included). Exit status: 0 all published, 1 some items
refused (each named by its line), 2 usage, token or connection.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import msgspec

from ._cli_api import HINTS, explain, say, status_of
from ._cli_profiles import Target
from .client import ClientError, Event, Publisher, TransportError
from .client._retry import new_key
from .core.addresses import connect_timeout_s, unreachable
from .core.ingest import MAX_KEY_CHARS, check_key
from .core.values import InvalidValue, Value, from_python

__all__ = ["run_publish"]

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode
_BATCH_BYTES = 2 * 1024 * 1024
"""An HTTP call's events stay well below the service's body limit (4 MiB by default)."""


@dataclass
class _Batch:
    events: list[Event] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    size: int = 0
    done: bool = False


def _value(raw: bytes | str, typed: bool) -> Value:
    try:
        obj = _decode(raw)
    except msgspec.DecodeError:
        # Some msgspec releases check UTF-8 themselves, with a message that names no byte:
        # the UnicodeDecodeError names it (raised only if that is the fault).
        if isinstance(raw, bytes):
            raw.decode()
        raise
    return Value.from_wire(obj) if typed else from_python(obj)


def _problem(e: BaseException) -> str:
    if isinstance(e, UnicodeDecodeError):
        return f"bad JSON: not UTF-8 (byte {e.start}); the input must be UTF-8 text"
    if isinstance(e, msgspec.DecodeError):
        return f"bad JSON: {e}"
    if isinstance(e, RecursionError):
        return "bad JSON: nested too deeply"
    return f"invalid_value: {e} ({HINTS['invalid_value']})"


def _lines(stream: IO[bytes], limit: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes), or None for a line over ``limit``, read past in pieces."""
    n = 0
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        n += 1
        if len(line) > limit and not line.endswith(b"\n"):
            while True:
                piece = stream.readline(1 << 20)
                if not piece or piece.endswith(b"\n"):
                    break
            yield n, None
        else:
            yield n, line


def _next_batch(it: Iterator[tuple[int, bytes | None]], args: argparse.Namespace,
                headers: list[tuple[str, Any]] | None) -> _Batch:
    b = _Batch()
    for n, line in it:
        if line is None:
            b.refused.append(f"line {n}: longer than {args.max_line_bytes} bytes (--max-line-bytes); refused")
        elif line.strip():
            try:
                data = _value(line, args.typed).to_wire()
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError, InvalidValue) as e:
                b.refused.append(f"line {n}: {_problem(e)}")
            else:
                ev = Event(namespace=args.namespace, data=data, headers=headers, idempotencyKey=f"{args.key}:{n}")
                b.events.append(ev)
                b.lines.append(n)
                b.size += len(line)
        if len(b.events) >= args.batch or b.size >= _BATCH_BYTES or len(b.refused) >= args.batch:
            return b
    b.done = True
    return b


async def run_publish(args: argparse.Namespace, target: Target) -> int:
    if args.batch < 1 or args.max_line_bytes < 1:
        say("tidings: --batch and --max-line-bytes are at least 1")
        return 2
    texts: dict[str, str] = {}
    for h in args.header:
        key, sep, value = h.partition("=")
        if not sep or not key:
            say(f"tidings: --header {h!r}: expected KEY=VALUE")
            return 2
        texts[key] = value
    headers: list[tuple[str, Any]] = [(k, {"Text": v}) for k, v in texts.items()]
    args.key_given = args.key is not None
    if args.key is None:
        args.key = new_key()
    elif (bad := check_key(args.key)) is not None or len(args.key) > MAX_KEY_CHARS - 12:
        say(f"tidings: --key: {bad or f'at most {MAX_KEY_CHARS - 12} characters (line numbers are added)'}")
        return 2
    try:
        await _reachable(target.url)
    except TransportError as e:
        say(f"tidings: {explain(e)}")
        return 2
    async with Publisher(target.url, target.token) as pub:
        if args.data is not None:
            if args.file is not None:
                say("tidings: give DATA or --file, not both")
                return 2
            try:
                data = _value(args.data.encode(errors="surrogateescape"), args.typed)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError, InvalidValue) as e:
                say(f"tidings: DATA: {_problem(e)}")
                return 2
            try:
                print(await pub.publish(args.namespace, data, headers=texts or None, key=args.key))
            except ClientError as e:
                say(f"tidings: {explain(e)}{_again(e, args.key, args.key_given)}")
                return status_of(e)
            return 0
        if args.file is None or str(args.file) == "-":
            return await _stream(pub, sys.stdin.buffer, args, headers or None)
        try:
            with open(args.file, "rb") as f:
                return await _stream(pub, f, args, headers or None)
        except OSError as e:
            say(f"tidings: cannot read {args.file}: {e.strerror}")
            return 2


async def _stream(pub: Publisher, stream: IO[bytes], args: argparse.Namespace,
                  headers: list[tuple[str, Any]] | None) -> int:
    it = _lines(stream, args.max_line_bytes)
    refused = 0
    batch = await asyncio.to_thread(_next_batch, it, args, headers)
    while True:
        # The next batch is read while this one is published: two at most in memory.
        reading = None if batch.done else asyncio.create_task(asyncio.to_thread(_next_batch, it, args, headers))
        for line in batch.refused:
            say(line)
        refused += len(batch.refused)
        if batch.events:
            try:
                results = await pub.publish_batch(batch.events)
            except ClientError as e:
                first, last = batch.lines[0], batch.lines[-1]
                where = f"lines {first}-{last}" if last != first else f"line {first}"
                say(f"tidings: {where}: {explain(e)}{_again(e, args.key, args.key_given)}")
                if reading is not None:
                    reading.cancel()
                return status_of(e) if status_of(e) == 2 or not refused else 1
            out = []
            for n, r in zip(batch.lines, results, strict=True):
                if r is not None and r.Err is msgspec.UNSET:
                    out.append(str(r.Ok[0]))
                else:
                    refused += 1
                    say(f"line {n}: " + (explain(_item_error(r)) if r is not None else "NotProcessed: not processed"))
            if out:
                sys.stdout.write("\n".join(out) + "\n")
                sys.stdout.flush()
        if reading is None:
            return 1 if refused else 0
        batch = await reading


async def _reachable(url: str) -> None:
    """Fail at once, within the connect timeout, when nothing listens at ``url``: the SDK
    sends again what it could not send until its deadline (a member restarting comes back),
    which is right for a publish under way, not for a command pointed at the wrong place."""
    import aiohttp

    try:
        limit = connect_timeout_s(os.environ)
    except ValueError as e:
        raise TransportError(str(e)) from None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=limit + 5, sock_connect=limit)) as http:
            async with http.get(url.rstrip("/") + "/healthz") as resp:
                await resp.read()
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
        why = "no answer in time" if isinstance(e, aiohttp.ConnectionTimeoutError) else str(e.os_error)
        raise TransportError(unreachable("the tidings service", url, limit, why)) from e
    except (aiohttp.ClientError, TimeoutError, OSError):
        return  # something answers there: the publish itself says what is wrong


def _again(e: ClientError, key: str, given: bool) -> str:
    """How to send again safely what may have been stored: the same command with the same
    keys (the service answers a stored one with its first id, and stores it no more)."""
    from .client import PublishUncertain

    if not isinstance(e, PublishUncertain):
        return ""
    return "; run the same command again with the same --key to finish safely" if given else (
        f"; run the same command again with --key {key} to finish safely"
    )


def _item_error(r: Any) -> BaseException:
    from .client import ItemError

    code = r.Err.code
    return ItemError(code, msgspec.structs.asdict(r.Err)[code])
