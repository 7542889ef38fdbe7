"""Signed pushes: each subscription's secrets, and the signer delivery calls per push.

Every subscription has at least one secret (``whsec_`` and the base64 of 32 random
bytes, or the one its registration gave). A push is signed with every secret of its
subscription that has not expired (Standard Webhooks, :mod:`tidings.core.webhooks`), so
during a rotation's overlap a receiver holding the old or the new secret accepts it.

The secrets are kept in memory, loaded at start and updated on registration and
rotation, so that signing (called by delivery for every push) never waits for the store.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence

from ...core import webhooks
from ...core.wire import ItemResult, SecretRotation, err, ok
from ...settings import Settings
from ...store import PrincipalRecord, Store, SubscriptionRecord, SubscriptionSecret
from ..registry import Registry

__all__ = ["Signing", "new_secret"]

MAX_OVERLAP_S = 2**31 - 1
_NS = 1_000_000_000


def new_secret() -> str:
    """A fresh secret: ``whsec_`` and the base64 of 32 random bytes."""
    return webhooks.encode_secret(secrets.token_bytes(32))


class Signing:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        settings: Settings,
        *,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._store = store
        self._registry = registry
        self._settings = settings
        self._clock = clock
        self._secrets: dict[int, list[SubscriptionSecret]] = {}
        """Per subscription, newest first; expired ones are dropped as they are met."""

    async def load(self) -> None:
        """Read every subscription's secrets; one that has none (registered before pushes
        were signed, or the process stopped in between) is given one."""
        self._secrets.clear()
        now = self._clock()
        for sub_id in list(self._registry.subscriptions):
            found = await self._store.secrets(sub_id, now)
            if not found:
                found = [SubscriptionSecret(secret=new_secret(), created_at=now)]
                await self._store.add_secret(sub_id, found[0].secret, None, created_at=now)
            self._secrets[sub_id] = found

    async def reload(self, sub_id: int) -> None:
        """Read one subscription's secrets again (made or rotated through another broadcaster)."""
        found = await self._store.secrets(sub_id, self._clock())
        if found:
            self._secrets[sub_id] = found
        else:
            self._secrets.pop(sub_id, None)

    async def subscription_created(self, sub: SubscriptionRecord, secret: str | None) -> None:
        """Called by the orchestrator between storing a subscription and starting its delivery."""
        now = self._clock()
        record = SubscriptionSecret(secret=secret or new_secret(), created_at=now)
        if await self._store.add_secret(sub.id, record.secret, None, created_at=now):
            self._secrets[sub.id] = [record]
        self._forget_ended(sub.id)

    def _forget_ended(self, new_id: int) -> None:
        # Subscriptions end in several places (delete, 410 Gone, a deleted publication):
        # drop their secrets here, once they are as many as the live ones.
        if len(self._secrets) > 2 * len(self._registry.subscriptions) + 64:
            live = self._registry.subscriptions
            self._secrets = {i: s for i, s in self._secrets.items() if i in live or i == new_id}

    def sign(self, sub_id: int, msg_id: str, body: bytes) -> dict[str, str]:
        """The Standard Webhooks headers of a push (``Delivery.signer``); none if the
        subscription has no secret."""
        now = self._clock()
        live = self._live(sub_id, now)
        return webhooks.sign(live, msg_id, now // _NS, body) if live else {}

    def live_secrets(self, sub_id: int) -> list[str]:
        """The secrets a push of ``sub_id`` is signed with now: what a replay's pusher
        process signs with (``replay._pusher``), over its private pipe."""
        return self._live(sub_id, self._clock())

    def _live(self, sub_id: int, now: int) -> list[str]:
        found = self._secrets.get(sub_id)
        if not found:
            return []
        live = [s for s in found if s.expires_at is None or s.expires_at > now]
        if len(live) < len(found):
            self._secrets[sub_id] = live
        return [s.secret for s in live]

    def _refuse(self, caller: PrincipalRecord, sub_id: int) -> ItemResult | None:
        sub = self._registry.subscriptions.get(sub_id)
        if sub is None:
            return err("NotFound", f"no subscription {sub_id}")
        if caller.name != sub.subscriber and not self._registry.controls_subscription(caller, sub):
            return err("Unauthorized", f"{caller.name} is not the subscriber or a controller of subscription {sub_id}")
        return None

    async def get(self, caller: PrincipalRecord, ids: Sequence[int]) -> list[ItemResult]:
        """``tidings_get_subscription_secrets``: the secrets in force, newest first, masked,
        so that a listing (a console, a log of answers) never holds one that signs."""
        return await self._secrets_of(caller, ids, webhooks.mask)

    async def reveal(self, caller: PrincipalRecord, ids: Sequence[int]) -> list[ItemResult]:
        """``tidings_reveal_subscription_secrets``: the secrets in force, newest first, in
        full. A receiver must hold them to verify pushes, including those the broker made
        for a subscription registered without one; only the subscription's controllers get
        them, and only by asking for them by name."""
        return await self._secrets_of(caller, ids, lambda secret: secret)

    async def _secrets_of(
        self, caller: PrincipalRecord, ids: Sequence[int], shown: Callable[[str], str]
    ) -> list[ItemResult]:
        out: list[ItemResult] = []
        now = self._clock()
        for i in ids:
            refused = self._refuse(caller, i)
            if refused is not None:
                out.append(refused)
                continue
            out.append(ok([shown(s.secret) for s in await self._store.secrets(i, now)]))
        return out

    async def rotate(self, caller: PrincipalRecord, rotations: Sequence[SecretRotation]) -> list[ItemResult]:
        """``tidings_rotate_subscription_secret``: Ok is the new secret."""
        out: list[ItemResult] = []
        for r in rotations:
            refused = self._refuse(caller, r.id)
            if refused is not None:
                out.append(refused)
                continue
            overlap = self._settings.secret_overlap_s if r.overlap_s is None else r.overlap_s
            if not 0 <= overlap <= MAX_OVERLAP_S:
                out.append(err("ImproperConfig", f"overlap_s is a Nat of at most {MAX_OVERLAP_S} seconds"))
                continue
            now = self._clock()
            secret = new_secret()
            if not await self._store.add_secret(r.id, secret, now + overlap * _NS, created_at=now):
                out.append(err("NotFound", f"no subscription {r.id}"))
                continue
            if r.id in self._registry.subscriptions:
                self._secrets[r.id] = await self._store.secrets(r.id, now)
            out.append(ok(secret))
        return out
