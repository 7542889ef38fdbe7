"""Standard Webhooks signatures: sign a push, verify one. Pure: no clock, no randomness.

A signed request carries three headers::

    webhook-id: <message id>             the same on every retry of one push
    webhook-timestamp: <unix seconds>    when this try was signed
    webhook-signature: v1,<sig> v1,<sig> one per secret in force, space-separated

``<sig>`` is ``base64(HMAC-SHA256(key, f"{id}.{timestamp}.".encode() + body))``. A secret
is ``whsec_<base64 key>`` (the Standard Webhooks form); a secret without that prefix is
used as it is (its UTF-8 bytes are the key), for receivers that already have one.

Rotation works by signing with every secret in force: while an old and a new secret
overlap, each push carries both signatures, and a receiver holding either accepts it.

Examples::

    headers = sign(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], "msg_1", 1_700_000_000, body)
    verify(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], headers, body, now=1_700_000_010)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence

__all__ = [
    "ID_HEADER",
    "PREFIX",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WebhookVerificationError",
    "encode_secret",
    "mask",
    "secret_error",
    "sign",
    "verify",
]

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
PREFIX = "whsec_"
MIN_KEY_BYTES = 24
MAX_KEY_BYTES = 64
MAX_SECRET_CHARS = 256


class WebhookVerificationError(ValueError):
    """A request's signature does not hold; ``reason`` says why (for logs, not for branching)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _key(secret: str) -> bytes:
    if secret.startswith(PREFIX):
        try:
            return base64.b64decode(secret[len(PREFIX):], validate=True)
        except binascii.Error:
            raise ValueError(f"secret {secret[:len(PREFIX) + 2]}… is not {PREFIX}<base64>") from None
    return secret.encode()


def encode_secret(key: bytes) -> str:
    """The ``whsec_`` form of a key; make one with ``encode_secret(secrets.token_bytes(32))``."""
    return PREFIX + base64.b64encode(key).decode()


def mask(secret: str) -> str:
    """How a secret is shown after it was handed out (docs/security.md): its prefix and
    four more characters, enough to tell two apart and nothing to sign with."""
    head = len(PREFIX) if secret.startswith(PREFIX) else 0
    return secret[: head + 4] + "…"


def secret_error(secret: str) -> str | None:
    """Why ``secret`` is not acceptable as a subscription's secret, or None if it is.

    Accepted: ``whsec_`` and the base64 of 24 to 64 random bytes, or a raw secret of 24 to
    256 visible ASCII characters.
    """
    if secret.startswith(PREFIX):
        try:
            key = _key(secret)
        except ValueError:
            return f"a secret is {PREFIX} followed by standard base64"
        if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
            return f"a {PREFIX} secret encodes {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes, not {len(key)}"
        return None
    if not MIN_KEY_BYTES <= len(secret) <= MAX_SECRET_CHARS or not all(" " < c < "\x7f" for c in secret):
        return (
            f"a secret is {PREFIX}<base64 of {MIN_KEY_BYTES}-{MAX_KEY_BYTES} bytes>, or "
            f"{MIN_KEY_BYTES} to {MAX_SECRET_CHARS} visible ASCII characters"
        )
    return None


def _signature(key: bytes, msg_id: str, timestamp: int | str, body: bytes) -> str:
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


def sign(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers for ``body``, signed with every one of ``secrets``."""
    if not secrets:
        raise ValueError("sign needs at least one secret")
    sigs = " ".join(f"v1,{_signature(_key(s), msg_id, timestamp, body)}" for s in secrets)
    return {ID_HEADER: msg_id, TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: sigs}


def verify(
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    now: int,
    tolerance_s: int = 300,
) -> None:
    """Check that ``body`` was signed by one of ``secrets`` at most ``tolerance_s`` from ``now``.

    ``headers`` is looked up by lower-case name. Raises :class:`WebhookVerificationError`.
    """
    msg_id = headers.get(ID_HEADER)
    ts = headers.get(TIMESTAMP_HEADER)
    given = headers.get(SIGNATURE_HEADER)
    if not msg_id or not ts or not given:
        missing = [h for h, v in ((ID_HEADER, msg_id), (TIMESTAMP_HEADER, ts), (SIGNATURE_HEADER, given)) if not v]
        raise WebhookVerificationError(f"missing header(s): {', '.join(missing)}")
    if not ts.isascii() or not ts.isdigit() or len(ts) > 20:
        raise WebhookVerificationError(f"{TIMESTAMP_HEADER} is not a number of seconds")
    age = now - int(ts)
    if age > tolerance_s:
        raise WebhookVerificationError(f"the signature is {age} s old; at most {tolerance_s} s are accepted")
    if -age > tolerance_s:
        raise WebhookVerificationError(f"the timestamp is {-age} s in the future; at most {tolerance_s} s accepted")
    offered = [p[3:].encode() for p in given.split(" ") if p.startswith("v1,")]
    if not offered:
        raise WebhookVerificationError("no v1 signature")
    found = False
    for secret in secrets:
        expected = _signature(_key(secret), msg_id, ts, body).encode()
        for sig in offered:
            # Every comparison runs: how long verification takes says nothing about which matched.
            found |= hmac.compare_digest(expected, sig)
    if not found:
        raise WebhookVerificationError("no signature matches a known secret")
