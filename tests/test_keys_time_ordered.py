"""The idempotency keys tidings' publishers make (core.keys): RFC 9562 version 7 UUIDs,
valid keys, ordered by their millisecond, and distinct by their random bits."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.client._retry import keyed, new_key
from tidings.core.ingest import check_key
from tidings.core.keys import RANDOM_BYTES, uuid7
from tidings.core.wire import Event

_MS = st.integers(0, 2**48 - 1)
_RAND = st.binary(min_size=RANDOM_BYTES, max_size=RANDOM_BYTES)


@given(_MS, _RAND)
def test_a_key_is_a_version_7_uuid_of_its_millisecond(ms: int, rand: bytes) -> None:
    k = uuid7(ms, rand)
    u = uuid.UUID(k)
    assert (u.version, u.variant) == (7, uuid.RFC_4122)
    assert u.int >> 80 == ms and str(u) == k and check_key(k) is None


@given(_MS, _MS, _RAND, _RAND)
def test_keys_sort_as_their_times(a: int, b: int, ra: bytes, rb: bytes) -> None:
    if a != b:
        assert (uuid7(a, ra) < uuid7(b, rb)) == (a < b)


@given(_MS, _RAND, _RAND)
def test_keys_of_one_millisecond_differ_by_their_random_bits(ms: int, ra: bytes, rb: bytes) -> None:
    # 74 of the 80 random bits are kept: the 6 between the two random parts are dropped.
    differ = (int.from_bytes(ra, "big") ^ int.from_bytes(rb, "big")) & ~(0x3F << 62)
    assert (uuid7(ms, ra) == uuid7(ms, rb)) == (differ == 0)


def test_random_bytes_of_another_length_are_refused() -> None:
    with pytest.raises(ValueError, match="10 random bytes"):
        uuid7(1, b"short")


def test_the_sdk_keys_each_event_in_time_order_and_keeps_a_key_given() -> None:
    made = [keyed(Event(namespace="a.b", data={"Nat": i})).idempotencyKey for i in range(200)]
    assert all(k is not None and uuid.UUID(k).version == 7 for k in made)
    assert len(set(made)) == 200
    times = [uuid.UUID(k).int >> 80 for k in made if k is not None]
    assert times == sorted(times)
    assert keyed(Event(namespace="a.b", data={"Nat": 1}, idempotencyKey="mine")).idempotencyKey == "mine"
    assert uuid.UUID(new_key()).version == 7
