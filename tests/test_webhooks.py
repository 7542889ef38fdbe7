"""Standard Webhooks signing and verification (``tidings.core.webhooks``), no I/O."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from tidings.core.webhooks import WebhookVerificationError, encode_secret, secret_error, sign, verify

# The Standard Webhooks reference vector: a receiver's own library must accept what we send.
REF_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
REF_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
REF_TS = 1614265330
REF_BODY = b'{"test": 2432232314}'
REF_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

OLD = encode_secret(bytes(range(32)))
NEW = encode_secret(bytes(range(32, 64)))
BODY = b'[{"id":1}]'
NOW = 1_763_780_000


def test_reference_vector() -> None:
    assert sign([REF_SECRET], REF_ID, REF_TS, REF_BODY) == {
        "webhook-id": REF_ID, "webhook-timestamp": str(REF_TS), "webhook-signature": REF_SIG,
    }
    verify([REF_SECRET], sign([REF_SECRET], REF_ID, REF_TS, REF_BODY), REF_BODY, now=REF_TS)


def test_known_vector_computed_by_hand() -> None:
    key = bytes(range(32))
    mac = hmac.new(key, b"s1-7-9.1763780000." + BODY, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(mac).decode()
    assert OLD == "whsec_" + base64.b64encode(key).decode()
    assert sign([OLD], "s1-7-9", NOW, BODY)["webhook-signature"] == expected


def test_raw_secret_is_its_utf8_bytes() -> None:
    raw = "a-raw-secret-of-24-chars!"
    mac = hmac.new(raw.encode(), b"m.5." + BODY, hashlib.sha256).digest()
    assert sign([raw], "m", 5, BODY)["webhook-signature"] == "v1," + base64.b64encode(mac).decode()
    # ... the same key as whsec_ and the base64 of those bytes (what a Standard Webhooks library wants).
    assert sign([encode_secret(raw.encode())], "m", 5, BODY) == sign([raw], "m", 5, BODY)


def test_every_secret_signs_and_either_verifies() -> None:
    headers = sign([NEW, OLD], "m1", NOW, BODY)
    sigs = headers["webhook-signature"].split(" ")
    assert sigs == [sign([s], "m1", NOW, BODY)["webhook-signature"] for s in (NEW, OLD)]
    verify([OLD], headers, BODY, NOW)
    verify([NEW], headers, BODY, NOW)
    verify([encode_secret(b"x" * 32), NEW], headers, BODY, NOW)
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        verify([encode_secret(b"x" * 32)], headers, BODY, NOW)
    # Unknown versions are ignored, not fatal.
    verify([OLD], {**headers, "webhook-signature": "v2,abc " + headers["webhook-signature"]}, BODY, NOW)


def test_tolerance() -> None:
    headers = sign([OLD], "m", NOW, BODY)
    verify([OLD], headers, BODY, NOW + 300)
    verify([OLD], headers, BODY, NOW - 300)
    with pytest.raises(WebhookVerificationError, match="old"):
        verify([OLD], headers, BODY, NOW + 301)
    with pytest.raises(WebhookVerificationError, match="future"):
        verify([OLD], headers, BODY, NOW - 301)
    verify([OLD], headers, BODY, NOW + 1000, tolerance_s=1000)


@pytest.mark.parametrize(
    "change",
    [
        {"body": BODY + b" "},
        {"webhook-id": "other"},
        {"webhook-timestamp": str(NOW + 1)},
        {"webhook-signature": "v1," + base64.b64encode(b"\0" * 32).decode()},
        {"webhook-signature": "v1,not base64"},
        {"webhook-signature": "v0,abc"},
    ],
)
def test_tampering_is_refused(change: dict[str, object]) -> None:
    headers = sign([OLD], "m", NOW, BODY)
    body = change.pop("body", BODY)
    assert isinstance(body, bytes)
    with pytest.raises(WebhookVerificationError):
        verify([OLD], {**headers, **change}, body, NOW)  # type: ignore[dict-item]


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_headers(missing: str) -> None:
    headers = sign([OLD], "m", NOW, BODY)
    del headers[missing]
    with pytest.raises(WebhookVerificationError, match=missing) as e:
        verify([OLD], headers, BODY, NOW)
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("ts", ["-5", "1e9", "", "12a", "9" * 30, "١٢"])
def test_malformed_timestamps(ts: str) -> None:
    headers = {**sign([OLD], "m", NOW, BODY), "webhook-timestamp": ts}
    with pytest.raises(WebhookVerificationError):
        verify([OLD], headers, BODY, NOW)


def test_secret_format() -> None:
    assert secret_error(OLD) is None
    assert secret_error(REF_SECRET) is None  # 24 bytes
    assert secret_error(encode_secret(b"x" * 64)) is None
    assert secret_error("y" * 24) is None
    for bad in ["whsec_", "whsec_!!!!", encode_secret(b"x" * 23), encode_secret(b"x" * 65), "short", "y" * 23,
                "has a space in it, so no!", "y" * 257, "ünïcödé" * 5]:
        assert secret_error(bad) is not None, bad
    with pytest.raises(ValueError):
        sign([], "m", NOW, BODY)
