"""Integers as long as tidings reads them (core.long_ints): up to 4,300 digits (4,299 when
negative) every face takes, past that every face refuses as out of range, naming the
bound and where the integer is; never "malformed JSON" for well-formed JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.client import EventNotification, Subscriber
from tidings.core.long_ints import INT_LIMIT, MAX_INT_DIGITS, NEGATIVE_LIMIT, long_integer
from tidings.core.values import InvalidValue, check, from_python
from tidings.pipeline._rows import RowRefused, _headers, _wire_data

from .conftest import ServerProcess, admin_api, eventually

NS = "com.example.long"
LONGEST = int("9" * MAX_INT_DIGITS)
LONGEST_NEGATIVE = -int("9" * (MAX_INT_DIGITS - 1))
TOO_LONG = "1" * 4401  # as text: past Python's own conversion limit, which msgspec obeys

# JSON documents with integers of every length around the bound, anywhere.
_ints = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(MAX_INT_DIGITS - 2, MAX_INT_DIGITS + 3).map(lambda n: 10**n - 1),
    st.integers(MAX_INT_DIGITS - 3, MAX_INT_DIGITS + 2).map(lambda n: -(10**n - 1)),
)
_keys = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
_docs = st.recursive(
    st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False), _keys, _ints),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)


def _too_long(x: int) -> bool:
    return not NEGATIVE_LIMIT < x < INT_LIMIT  # more than 4,300 characters: the sign counts, as in msgspec


def _first_long(doc: Any, path: str = "$") -> str | None:
    """Where the first integer past the bound is, in document order."""
    if isinstance(doc, int) and not isinstance(doc, bool):
        return path if _too_long(doc) else None
    items: list[tuple[str, Any]] = []
    if isinstance(doc, list):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(doc)]
    elif isinstance(doc, dict):
        items = [(f"{path}.{k}" if k.isidentifier() else f"{path}[{json.dumps(k, ensure_ascii=False)}]", v)
                 for k, v in doc.items()]
    for where, v in items:
        found = _first_long(v, where)
        if found is not None:
            return found
    return None


def _text(doc: Any) -> str:
    # The stdlib writes integers of any length (``sys.set_int_max_str_digits`` aside).
    import sys

    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return json.dumps(doc, ensure_ascii=False)
    finally:
        sys.set_int_max_str_digits(limit)


@settings(max_examples=300, deadline=None)
@given(_docs)
def test_a_long_integer_is_found_exactly_when_the_decoder_refuses_one(doc: Any) -> None:
    text = _text(doc)
    found = long_integer(text.encode())
    try:
        msgspec.json.decode(text.encode())
        decoded = True
    except msgspec.ValidationError as e:
        decoded = False
        assert long_integer(text.encode(), e) == found  # the decoder's error says it is one
    assert decoded == (found is None), (found, text[:200])
    if found is not None:
        where, digits = found
        assert where == _first_long(doc)
        assert digits > MAX_INT_DIGITS - 1


@settings(max_examples=100, deadline=None)
@given(st.integers(1, MAX_INT_DIGITS + 50), st.booleans())
def test_values_hold_integers_to_the_bound(digits: int, negative: bool) -> None:
    x = -(10**digits - 1) if negative else 10**digits - 1
    within = digits + negative <= MAX_INT_DIGITS
    for wire in ({"Int": x}, {"Map": [["n", {"Int": x}]]}, *([{"Nat": x}, {"Nats": [1, x]}] if x > 0 else [])):
        if within:
            check(wire)
        else:
            with pytest.raises(InvalidValue, match="4,300"):
                check(wire)


def test_the_sdk_refuses_an_integer_past_the_bound_before_sending_it() -> None:
    # msgspec cannot even write one out (a bare ValueError from the encoder before).
    assert from_python({"n": LONGEST}).to_wire() == {"Map": [["n", {"Nat": LONGEST}]]}
    for x in (LONGEST + 1, LONGEST_NEGATIVE - 1):
        with pytest.raises(InvalidValue, match="4,300"):
            from_python({"n": [x]})


def test_the_pipeline_refuses_a_row_past_the_bound_as_out_of_range() -> None:
    with pytest.raises(RowRefused) as e:
        _wire_data(json.dumps({"Map": [["a", {"Nat": 1}], ["n", {"Nat": 0}]]}).replace("0", TOO_LONG))
    assert e.value.code == "OutOfRange"
    assert "$.data.Map[1][1].Nat" in e.value.message and "4,300" in e.value.message
    with pytest.raises(RowRefused) as e:
        _headers('[["k", {"Int": -' + "1" * 4401 + "}]]")
    assert e.value.code == "OutOfRange" and "$.headers[0][1].Int" in e.value.message
    assert _wire_data(json.dumps({"Nat": LONGEST})) == {"Nat": LONGEST}


async def _post(url: str, body: bytes, token: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.post(
        url, data=body, headers={"authorization": f"Bearer {token}", "content-type": "application/json"}
    ) as r:
        return r.status, await r.json(content_type=None)


@pytest.mark.e2e
@pytest.mark.parametrize("workers", ["1", "2"], ids=["broker", "fronts"])
async def test_every_face_takes_integers_to_the_bound_and_refuses_beyond_naming_it(
    server_factory: Callable[..., ServerProcess], endpoints: Any, workers: str
) -> None:
    server = server_factory(workers=workers)
    got: list[Any] = []

    async def handle(n: EventNotification) -> None:
        got.append(n.data)

    sub = Subscriber(handle, url=server.url, token=server.admin_token)
    ep = await endpoints(sub)
    try:
        async with aiohttp.ClientSession() as http:
            await admin_api(http, server, "icrc72_register_publication", [{"namespace": NS}])
        await sub.subscribe(NS, ep.url)
        # HTTP: the longest integers are taken and delivered exactly.
        wire = {"Map": [["n", {"Nat": LONGEST}], ["i", {"Int": LONGEST_NEGATIVE}]]}
        status, body = await _post(f"{server.url}/v1/icrc72_publish",
                                   msgspec.json.encode([{"namespace": NS, "data": wire}]), server.admin_token)
        assert status == 200 and "Ok" in body[0], body
        await eventually(lambda: got, timeout=15)
        assert got == [wire]
        # HTTP: one digit more is out of range, with the bound and the path.
        for value in (f'{{"Nat": {TOO_LONG}}}', f'{{"Int": -{"9" * MAX_INT_DIGITS}}}'):
            raw = f'[{{"namespace": "{NS}", "data": {{"Map": [["n", {value}]]}}}}]'.encode()
            status, body = await _post(f"{server.url}/v1/icrc72_publish", raw, server.admin_token)
            assert status == 400 and body["error"]["code"] == "out_of_range", body
            assert "$[0].data.Map[0][1]." in body["error"]["message"] and "4,300" in body["error"]["message"]
        # The stream: refused under its ref, the connection goes on.
        url = server.url.replace("http://", "ws://") + "/v1/stream"
        async with aiohttp.ClientSession() as http, http.ws_connect(
            url, headers={"authorization": f"Bearer {server.admin_token}"}
        ) as ws:
            await ws.send_str(f'{{"op": "publish", "ref": 7, "event": {{"namespace": "{NS}", '
                              f'"data": {{"Nat": {TOO_LONG}}}}}}}')
            answer = json.loads((await ws.receive(timeout=10)).data)
            assert answer["op"] == "error" and answer["ref"] == 7 and answer["code"] == "out_of_range", answer
            assert "$.event.data.Nat" in answer["message"] and "4,300" in answer["message"]
            await ws.send_str(json.dumps({"op": "publish", "ref": 8, "event": {"namespace": NS, "data": {"Nat": 1}}}))
            answer = json.loads((await ws.receive(timeout=10)).data)
            assert answer["op"] == "results" and answer["refs"] == [8], answer
        # The Confluent face: a body past the bound is a 422 naming it, not broken JSON.
        status, body = await _post(f"{server.url}/subjects/long-value/versions",
                                   f'{{"schema": "{{}}", "version": {TOO_LONG}}}'.encode(), server.admin_token)
        assert status == 422 and "$.version" in body["message"] and "4,300" in body["message"], body
    finally:
        await sub.close()
