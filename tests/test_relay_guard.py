"""``icrc72_publish_relay`` is for broadcasters sharing a store (test_cluster.py has the
forwarding itself): a signature holds only for its secret, its body and its time, and a
broadcaster alone takes no relay at all."""

from __future__ import annotations

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.broker.cluster import MAX_SKEW_MS, RELAY_HEADER, sign, verify

from .conftest import ServerProcess

NOW = 1_790_000_000_000
secrets_ = st.binary(min_size=1, max_size=64)
bodies = st.binary(max_size=256)


@given(secrets_, bodies, st.integers(-MAX_SKEW_MS, MAX_SKEW_MS))
def test_a_signature_made_within_the_window_verifies(secret: bytes, body: bytes, skew: int) -> None:
    assert verify(secret, sign(secret, body, NOW + skew), body, NOW)


@given(secrets_, secrets_, bodies, bodies, st.integers(-10 * MAX_SKEW_MS, 10 * MAX_SKEW_MS))
def test_any_other_secret_body_or_time_fails(a: bytes, b: bytes, body: bytes, other: bytes, skew: int) -> None:
    header = sign(a, body, NOW + skew)
    fresh = abs(skew) <= MAX_SKEW_MS
    assert verify(a, header, body, NOW) == fresh
    if b != a:
        assert not verify(b, header, body, NOW)
    if other != body:
        assert not verify(a, header, other, NOW)


@given(st.text(max_size=300))
def test_a_garbled_header_fails_without_raising(header: str) -> None:
    assert not verify(b"secret", header, b"body", NOW)
    assert not verify(b"", sign(b"", b"body", NOW), b"body", NOW)  # no secret, no relay


@pytest.mark.e2e
async def test_a_lone_broadcaster_takes_no_relay(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as http:
        for headers in ({}, {RELAY_HEADER: sign(b"", b"x", NOW)}, {"authorization": f"Bearer {server.admin_token}"}):
            async with http.post(f"{server.url}/v1/icrc72_publish_relay", data=b"x", headers=headers) as r:
                assert r.status == 403
                assert (await r.json())["error"]["code"] == "forbidden"
