"""The one way the broker calls a URL that a principal gave (docs/security.md, "Outbound").

::

    async with Outbound(policy) as out:
        problem = await out.registration_problem(url)      # at registration: an itemised error
        answer = await out.post(url, body, headers, timeout_s=10, max_bytes=16_384)
        answer.code                                        # "ok", "http_503", "timeout", ...

Every call goes through :class:`~tidings.core.netpolicy.AddressPolicy` twice: the URL's
host when it is registered, and every address its name resolves to when a connection is
made (a resolver that drops refused addresses), so DNS rebinding cannot reach what
registration refused. IP-literal hosts never reach a resolver and are checked before the
request. Redirects are never followed. Answers are read up to a byte bound and within the
call's deadline; what a call reports is a short code, never the peer's words or an
exception's text, so nothing about the network behind a URL reaches a principal.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, AbstractStreamWriter, ResolveResult
from aiohttp.payload import BytesPayload
from aiohttp.resolver import ThreadedResolver

from .core.netpolicy import AddressPolicy, Refusal

__all__ = ["Answer", "Outbound", "url_syntax_problem"]

log = logging.getLogger("tidings.outbound")

MAX_URL = 2048


class _Blocked(OSError):
    """Every address of a host is refused by the policy (raised inside the resolver)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


class _PolicyResolver(ThreadedResolver):
    """Resolves as usual, then keeps only the addresses the policy allows."""

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        super().__init__()
        self._policy = policy
        self._inner = inner

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[
        ResolveResult
    ]:
        found = await (self._inner.resolve(host, port, family) if self._inner else super().resolve(host, port, family))
        if self._policy.host_allowed(host):
            return found
        kept: list[ResolveResult] = []
        first: Refusal | None = None
        for r in found:
            refusal = self._policy.refusal(ipaddress.ip_address(r["host"].split("%")[0]), port)
            if refusal is None:
                kept.append(r)
            elif first is None:
                first = refusal
        if not kept:
            raise _Blocked(first or Refusal("no_address", host))
        return kept


class _TooLate(Exception):
    """The call's ``until`` had passed as its first byte was to leave: nothing was sent."""


class _Until(BytesPayload):
    """A body that leaves only while ``until()`` (``time.monotonic``) is ahead, read as it
    is about to leave: a lease renewed while the connection was made counts. The request's
    head waits in aiohttp's buffer and leaves in one write with the body's first bytes, so
    a call refused here sent nothing at all: no name look-up, connection set-up or task
    switch lies between this check and the send, however long the process was stopped
    before it (a push past its lease's sure end: docs/scaling.md, "Failure model")."""

    def __init__(self, body: bytes, until: Callable[[], float]) -> None:
        super().__init__(body)  # the call's own Content-Type header, if any, is the one sent
        self._until = until

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        if time.monotonic() >= self._until():
            raise _TooLate
        await super().write_with_length(writer, content_length)


@dataclass(frozen=True, slots=True)
class Answer:
    """What a call got: ``code`` is ``ok`` for 2xx, ``http_<status>`` for other statuses,
    or the failure (``timeout``, ``connect_refused``, ``dns_failure``, ``tls_error``,
    ``blocked_address``, ``disconnected``, ``bad_response``, ``connect_error``;
    ``too_late``: the call's ``until`` had passed, and nothing was sent)."""

    code: str
    status: int | None = None
    body: bytes = b""
    """At most the call's ``max_bytes``; ``truncated`` says whether there was more."""
    truncated: bool = False
    retry_after: str | None = None
    headers: Any = None


def url_syntax_problem(url: str, what: str = "URL") -> str | None:
    """Why ``url`` is not an absolute http(s) URL with a usable host and port."""
    if len(url) > MAX_URL:
        return f"the {what} has more than {MAX_URL} characters"
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as e:
        return f"the {what} {url!r} is malformed ({e})"
    if parts.scheme not in ("http", "https") or not host:
        return f"the {what} {url!r} is not an absolute http(s) URL"
    if port == 0:
        return f"the {what} {url!r} has port 0"
    if any(c.isspace() or ord(c) < 32 for c in url):
        return f"the {what} {url!r} holds white space or control characters"
    return None


class Outbound:
    def __init__(
        self, policy: AddressPolicy, *, per_host: int = 16, total: int = 1024, connect_timeout_s: float = 5.0,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.policy = policy
        self._resolver = resolver  # the name service under the policy (tests give their own)
        self._per_host = per_host
        self._total = total
        self._connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Outbound:
        connector = aiohttp.TCPConnector(
            limit=self._total, limit_per_host=self._per_host, enable_cleanup_closed=True,
            resolver=_PolicyResolver(self.policy, self._resolver),
        )
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False, trust_env=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- checks -----------------------------------------------------------------------

    def literal_problem(self, url: str, what: str = "URL") -> str | None:
        """Syntax, and the policy for a host that is an IP literal (no DNS)."""
        problem = url_syntax_problem(url, what)
        if problem:
            return problem
        parts = urlsplit(url)
        host = parts.hostname or ""
        try:
            ip = ipaddress.ip_address(host.split("%")[0])
        except ValueError:
            if host in ("localhost",) or host.endswith(".localhost"):
                ip = ipaddress.ip_address("127.0.0.1")
            else:
                return None
        if self.policy.host_allowed(host):
            return None
        refusal = self.policy.refusal(ip, parts.port or (443 if parts.scheme == "https" else 80))
        return _refused(what, url, refusal) if refusal else None

    async def registration_problem(self, url: str, what: str = "URL") -> str | None:
        """:meth:`literal_problem`, then every address the host resolves to now. A name
        that does not resolve yet is accepted: it is checked again at each connection."""
        problem = self.literal_problem(url, what)
        if problem or not self.policy.restricted:
            return problem
        parts = urlsplit(url)
        host = parts.hostname or ""
        if self.policy.host_allowed(host):
            return None
        try:
            ipaddress.ip_address(host.split("%")[0])
            return None  # a literal: judged above
        except ValueError:
            pass
        try:
            infos = await asyncio.wait_for(
                asyncio.get_running_loop().getaddrinfo(host, parts.port or 80, type=socket.SOCK_STREAM), 5.0
            )
        except (OSError, TimeoutError, UnicodeError):
            return None
        ips = [ipaddress.ip_address(str(i[4][0]).split("%")[0]) for i in infos]
        refusal = self.policy.refusal_of_any(ips, parts.port)
        return _refused(what, url, refusal) if refusal else None

    # -- calls ------------------------------------------------------------------------

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], *, timeout_s: float, max_bytes: int,
        until: Callable[[], float] | None = None,
    ) -> Answer:
        return await self.request("POST", url, body, headers, timeout_s=timeout_s, max_bytes=max_bytes, until=until)

    async def request(
        self, method: str, url: str, body: bytes, headers: dict[str, str], *, timeout_s: float, max_bytes: int,
        until: Callable[[], float] | None = None,
    ) -> Answer:
        """One call of ``method`` (``POST``; ``OPTIONS`` for the CloudEvents webhook handshake).
        ``until``: gives the ``time.monotonic`` after which nothing may be sent (a lease's
        sure end), asked before the call and again as its first byte is about to leave;
        past it, the answer is ``too_late``."""
        if self._session is None:
            raise RuntimeError("Outbound is not open")
        if self.literal_problem(url) is not None:
            return Answer("blocked_address")
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, self._connect_timeout_s))
        data: bytes | _Until = body
        if until is not None:
            if time.monotonic() >= until():
                return Answer("too_late")
            data = _Until(body, until)
        try:
            async with asyncio.timeout(timeout_s + 1):  # the body read too, whatever the peer does
                async with self._session.request(
                    method, url, data=data, headers=headers, allow_redirects=False, timeout=timeout
                ) as resp:
                    data, truncated = await read_bounded(resp, max_bytes)
                    if truncated:
                        resp.close()  # do not drain the rest: drop the connection
                    status = resp.status
                    code = "ok" if 200 <= status < 300 else f"http_{status}"
                    return Answer(code, status, data, truncated, resp.headers.get("Retry-After"), resp.headers)
        except Exception as e:  # every failure becomes a code; CancelledError is not an Exception
            code = failure_code(e)
            log.debug("outbound %s failed: %s (%s)", method, code, type(e).__name__)
            return Answer(code)


async def read_bounded(resp: aiohttp.ClientResponse, max_bytes: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await resp.content.readany()
        if not chunk:
            return b"".join(chunks), False
        size += len(chunk)
        if size > max_bytes:
            chunks.append(chunk[: max_bytes - (size - len(chunk))])
            return b"".join(chunks), True
        chunks.append(chunk)


def failure_code(e: BaseException) -> str:
    """The short code for a failed call (never its text: docs/security.md)."""
    if isinstance(e.__cause__, _TooLate):
        return "too_late"
    if isinstance(e, (TimeoutError, asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return "timeout"
    if isinstance(e, aiohttp.ClientConnectorError):
        os_error = getattr(e, "os_error", None)
        if isinstance(os_error, _Blocked) or isinstance(e.__cause__, _Blocked):
            return "blocked_address"
        if isinstance(e, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientConnectorSSLError)):
            return "tls_error"
        if isinstance(e, getattr(aiohttp, "ClientConnectorDNSError", ())) or isinstance(os_error, socket.gaierror):
            return "dns_failure"
        if isinstance(os_error, ConnectionRefusedError):
            return "connect_refused"
        return "connect_error"
    if isinstance(e, aiohttp.ClientSSLError):
        return "tls_error"
    if isinstance(e, aiohttp.ServerDisconnectedError):
        return "disconnected"
    if isinstance(e, (aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        return "bad_response"
    if isinstance(e, aiohttp.InvalidURL):
        return "invalid_url"
    return "connect_error"


def _refused(what: str, url: str, refusal: Refusal) -> str:
    return (
        f"the {what} {url!r} is refused by the outbound policy: {refusal.address} is {refusal.rule.replace('_', '-')} "
        f"(rule: {refusal.rule}); an operator can open it with TIDINGS_OUTBOUND_ALLOW"
    )
