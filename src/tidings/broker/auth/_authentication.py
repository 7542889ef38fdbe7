"""Principals and their bearer tokens.

A token is ``tid_`` followed by 32 random bytes (URL-safe base64). Only its SHA-256 is
stored: with that much entropy a slow hash adds nothing, and lookups stay one index probe.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import time
from collections.abc import Callable

from ...errors import BadRequest, StoreUnavailable, Unauthenticated
from ...store import PrincipalRecord, Store

__all__ = ["Authenticator", "hash_token", "new_token", "valid_principal_name"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


def new_token() -> str:
    return "tid_" + secrets.token_urlsafe(32)


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def valid_principal_name(name: str) -> bool:
    return bool(_NAME.match(name))


class Authenticator:
    """Resolves bearer tokens to principals, caching what it has seen for ``cache_s``.

    The cache is short-lived on purpose: a token revoked from another process (the CLI
    works on the store directly) stops working here within ``cache_s``. While the store
    cannot be reached (a look-up fails as ``StoreUnavailable``), a token the store
    confirmed within ``stale_s`` keeps its principal: the caller is told what really
    fails (its commit, or an overloaded server) instead of that its token is in doubt. A
    revocation made meanwhile through another member holds here once the store answers
    again (docs/scaling.md, "Shared state")."""

    def __init__(self, store: Store, cache_size: int = 10_000, cache_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, stale_s: float = 30.0,
                 now_ns: Callable[[], int] = time.time_ns) -> None:
        self._store = store
        self._cache: dict[bytes, tuple[PrincipalRecord, float, float]] = {}
        """By token hash: the principal, until when it is used without a look-up, when the store last confirmed it."""
        self._cache_size = cache_size
        self._cache_s = cache_s
        self._clock = clock
        self._stale_s = stale_s
        self._now_ns = now_ns
        """The cluster's clock (``Broker.clock``): a principal's creation time, which users compare."""
        self._looking: dict[bytes, asyncio.Future[PrincipalRecord | None]] = {}

    async def principal(self, authorization: str | None) -> PrincipalRecord:
        if not authorization:
            raise Unauthenticated("missing Authorization: Bearer <token> header")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
        h = hash_token(token.strip())
        now = self._clock()
        hit = self._cache.get(h)
        if hit is not None and hit[1] > now:
            return hit[0]
        # One look-up per token at a time, shared by every request that needs it meanwhile:
        # when the cache entry of a busy token expires during a stall, thousands of
        # requests would otherwise each queue a read of their own.
        pending = self._looking.get(h)
        if pending is None:
            pending = self._looking[h] = asyncio.ensure_future(self._store.principal_by_token(h))
            pending.add_done_callback(lambda f: (self._looking.pop(h, None), f.cancelled() or f.exception()))
        try:
            rec = await asyncio.shield(pending)
        except StoreUnavailable:
            late = self._clock()
            if hit is not None and late < hit[2] + self._stale_s:
                # Kept for another term (never past ``stale_s`` from its confirmation): the
                # requests of the outage do not each wait for a look-up that fails as well.
                self._cache[h] = (hit[0], min(late + self._cache_s, hit[2] + self._stale_s), hit[2])
                return hit[0]
            raise
        if rec is None:
            self._cache.pop(h, None)
            raise Unauthenticated("unknown or revoked token")
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[h] = (rec, now + self._cache_s, now)
        return rec

    async def revoke(self, name: str, token: str | None = None) -> int:
        """Revoke one token of ``name`` (or all its tokens); effective here at once."""
        h = hash_token(token) if token is not None else None
        n = await self._store.revoke_tokens(name, h)
        for key in [k for k, (rec, _, _) in self._cache.items() if rec.name == name and (h is None or k == h)]:
            del self._cache[key]
        return n

    async def create(self, name: str, *, admin: bool = False) -> str | None:
        """Create a principal and return its first token; None if the name is taken."""
        if not valid_principal_name(name):
            raise BadRequest(
                f"invalid principal name {name!r}: use letters, digits and . _ : @ - (at most 128)",
                code="invalid_argument",
            )
        token = new_token()
        rec = PrincipalRecord(name=name, admin=admin, created_at=self._now_ns())
        return token if await self._store.create_principal(rec, hash_token(token)) else None

    async def issue(self, name: str) -> str | None:
        """A further token for an existing principal; None if there is no such principal."""
        token = new_token()
        return token if await self._store.add_token(name, hash_token(token)) else None
