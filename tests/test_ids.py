"""Crockford Base32 ids."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.ids import ALPHABET, InvalidId, decode, encode, parse_id

naturals = st.one_of(
    st.integers(min_value=0, max_value=2**64),
    st.integers(min_value=0, max_value=2**1024),
    st.sampled_from([0, 31, 32, 2**64 - 1, 2**64, 32**40 - 1, 32**40]),
)


@settings(max_examples=200, deadline=None)
@given(naturals)
def test_round_trip(n: int) -> None:
    text = encode(n)
    assert decode(text) == n
    assert parse_id(text) == n
    assert parse_id(n) == n
    assert set(text) <= set(ALPHABET)
    assert text == "0" or not text.startswith("0")  # no leading zeros, no padding


_SPELLINGS = {c: c + c.lower() for c in ALPHABET} | {"0": "0oO", "1": "1iIlL"}


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2**160), st.randoms(use_true_random=False))
def test_decoding_is_lenient(n: int, rnd: Any) -> None:
    # random case, hyphens anywhere, and Crockford's aliases for 0 and 1
    mangled = "".join(rnd.choice(_SPELLINGS[c]) + rnd.choice(["", "", "-", "--"]) for c in encode(n))
    assert decode(mangled) == n


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2**256), st.integers(min_value=0, max_value=2**256))
def test_order_of_equal_length_ids_follows_numbers(a: int, b: int) -> None:
    width = max(len(encode(a)), len(encode(b)))
    ea, eb = encode(a).rjust(width, "0"), encode(b).rjust(width, "0")
    assert (ea < eb) == (a < b)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0"),
        (1, "1"),
        (10, "A"),
        (17, "H"),
        (18, "J"),  # I is skipped
        (20, "M"),  # L is skipped
        (22, "P"),  # O is skipped
        (27, "V"),  # U is skipped
        (31, "Z"),
        (32, "10"),
        (1023, "ZZ"),
        (1024, "100"),
        (1234, "16J"),  # 1*32**2 + 6*32 + 18
        (2**64 - 1, "FZZZZZZZZZZZZ"),  # 64 bits = 4 bits (0b1111 = F) + 12 * 5 bits
        (2**64, "G000000000000"),
    ],
)
def test_known_vectors(n: int, text: str) -> None:
    assert encode(n) == text
    assert decode(text) == n


def test_alphabet() -> None:
    assert ALPHABET == "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    assert len(set(ALPHABET)) == 32
    for letter in "ILOU":
        assert letter not in ALPHABET


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("z", 31),
        ("zz", 1023),
        ("16j", 1234),
        ("16J", 1234),
        ("i", 1),
        ("I", 1),
        ("l", 1),
        ("L", 1),
        ("o", 0),
        ("O", 0),
        ("LO", 32),
        ("io", 32),
        ("1-6-J", 1234),
        ("16J-", 1234),
        ("0000", 0),
        ("0001", 1),
    ],
)
def test_decode_aliases(text: str, n: int) -> None:
    assert decode(text) == n
    assert parse_id(text) == n


@pytest.mark.parametrize(
    "text", ["", "-", "---", "U", "u", "*", "1*", "1 2", " 1", "1.0", "\u0663", "\uff21", "+1"]
)
def test_decode_rejects(text: str) -> None:
    with pytest.raises(InvalidId):
        decode(text)
    with pytest.raises(InvalidId):
        parse_id(text)


def test_invalid_id_is_a_value_error() -> None:
    assert issubclass(InvalidId, ValueError)


@pytest.mark.parametrize("bad", [-1, -(2**100), True, False, 1.0, 1.5, None, [1], ["1"], b"1", {"Nat": 1}])
def test_encode_rejects_non_naturals(bad: Any) -> None:
    with pytest.raises(InvalidId):
        encode(bad)


def test_parse_id_accepts_nat_and_text() -> None:
    assert parse_id(0) == 0
    assert parse_id(2**100) == 2**100
    assert parse_id("0") == 0
    assert parse_id(encode(2**100)) == 2**100


@pytest.mark.parametrize(
    "bad", [-1, -(2**100), True, False, 0.0, 1.0, 1.5, None, [1], ["1"], (1,), b"1", {"Nat": 1}]
)
def test_parse_id_rejects(bad: Any) -> None:
    with pytest.raises(InvalidId):
        parse_id(bad)
