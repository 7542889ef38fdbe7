"""The SDK's HTTP plumbing: one aiohttp session, typed calls, errors mapped."""

from __future__ import annotations

import os
from typing import Any, TypeVar

import aiohttp
import msgspec

from ..core.addresses import connect_timeout_s, unreachable
from ..core.undecodable import UNDECODABLE
from ..errors import ConfigError
from ._errors import ApiResponseError, TransportError

T = TypeVar("T")

_encode = msgspec.json.Encoder().encode


class _ErrorBody(msgspec.Struct):
    code: str
    message: str


class _Error(msgspec.Struct):
    error: _ErrorBody


_error_decoder = msgspec.json.Decoder(_Error)
_NOT_REPEATABLE = frozenset({"icrc72_publish"})


class Connection:
    """A base URL and a bearer token; calls ``POST /v1/<method>``."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        try:
            self._connect_timeout = min(timeout, connect_timeout_s(os.environ))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self._session: aiohttp.ClientSession | None = None
        self._decoders: dict[Any, msgspec.json.Decoder[Any]] = {}

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout, sock_connect=self._connect_timeout),
                headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
            )
        return self._session

    async def call(
        self, method: str, arg: Any, result: type[T], warnings: list[str] | None = None, *,
        timeout: float | None = None,
    ) -> T:
        """Call ``method``; ``Warning`` response headers go to ``warnings``.

        A call that is safe to repeat is tried once more when a pooled connection turns
        out to be dead (the server restarted); ``icrc72_publish`` is not, since the first
        try may have been stored: that failure is raised to the caller."""
        body = b"" if arg is None else _encode(arg)
        tries = 1 if method in _NOT_REPEATABLE else 2
        within = None if timeout is None else aiohttp.ClientTimeout(
            total=timeout, sock_connect=min(timeout, self._connect_timeout)
        )
        retry_after: float | None = None
        for attempt in range(tries):
            try:
                async with self._http().post(f"{self.url}/v1/{method}", data=body, timeout=within) as resp:
                    raw = await resp.read()
                    status = resp.status
                    if status != 200:
                        retry_after = _seconds(resp.headers.get("Retry-After"))
                    if warnings is not None and "Warning" in resp.headers:
                        warnings.extend(resp.headers.getall("Warning"))
                break
            except aiohttp.ServerDisconnectedError as e:
                if attempt + 1 < tries:
                    continue
                raise TransportError(f"{method}: {e!r}") from e
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
                why = "no answer in time" if isinstance(e, aiohttp.ConnectionTimeoutError) else str(e.os_error)
                raise TransportError(f"{method}: " + unreachable(
                    "the tidings service", self.url, self._connect_timeout, why)) from e
            except TimeoutError as e:
                raise TransportError(f"{method}: the tidings service at {self.url} did not answer "
                                     f"within {timeout or self._timeout:g} s") from e
            except (aiohttp.ClientError, OSError) as e:
                raise TransportError(f"{method}: {e!r}") from e
        if status != 200:
            try:
                problem = _error_decoder.decode(raw).error
            except UNDECODABLE:
                raise ApiResponseError(
                    status, "http_error", raw[:200].decode(errors="replace"), retry_after
                ) from None
            raise ApiResponseError(status, problem.code, problem.message, retry_after)
        dec = self._decoders.get(result)
        if dec is None:
            dec = self._decoders[result] = msgspec.json.Decoder(result)
        return dec.decode(raw)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _seconds(value: str | None) -> float | None:
    """A ``Retry-After`` in seconds (an HTTP date is read as "soon": 1 s); None if absent."""
    if value is None:
        return None
    v = value.strip()
    if v.isascii() and v.isdigit() and len(v) < 7:
        return float(v)
    return 1.0
