"""Limits per principal, and bounds on every duration and count a principal may set."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core import config as cfg
from tidings.errors import ConfigError
from tidings.settings import Settings

from .conftest import ServerProcess, admin_api, free_port

pytestmark = pytest.mark.e2e


async def as_(http: aiohttp.ClientSession, srv: ServerProcess, token: str, method: str, arg: Any) -> Any:
    async with http.post(f"{srv.url}/v1/{method}", data=json.dumps(arg),
                         headers={"authorization": f"Bearer {token}"}) as r:
        assert r.status == 200
        return await r.json()


def limited(r: dict[str, Any], setting: str) -> bool:
    e = r.get("Err", {}).get("GenericError")
    return e is not None and e["error_code"] == 429 and setting in e["message"]


async def test_publications_and_subscriptions_per_principal_are_limited(
    server_factory: Callable[..., ServerProcess], http: aiohttp.ClientSession
) -> None:
    srv = server_factory(max_publications_per_principal="3", max_subscriptions_per_principal="2")
    alice = (await admin_api(http, srv, "tidings_create_principal", {"name": "alice"}))["token"]
    pubs = await as_(http, srv, alice, "icrc72_register_publication", [{"namespace": f"a.n{i}"} for i in range(4)])
    assert ["Ok" in r for r in pubs] == [True, True, True, False]
    assert limited(pubs[3], "TIDINGS_MAX_PUBLICATIONS_PER_PRINCIPAL")
    # Registering an existing namespace again holds nothing new: not refused.
    (again,) = await as_(http, srv, alice, "icrc72_register_publication", [{"namespace": "a.n0"}])
    assert "Ok" in again
    ep = f"http://127.0.0.1:{free_port()}/"
    subs = await as_(http, srv, alice, "icrc72_register_subscription",
                     [{"namespace": "a.n0", "endpoint": ep} for _ in range(3)])
    assert ["Ok" in r for r in subs] == [True, True, False]
    assert limited(subs[2], "TIDINGS_MAX_SUBSCRIPTIONS_PER_PRINCIPAL")
    # Freeing one makes room; an admin is not limited.
    await as_(http, srv, alice, "icrc72_delete_subscription", [subs[0]["Ok"]])
    (r,) = await as_(http, srv, alice, "icrc72_register_subscription", [{"namespace": "a.n0", "endpoint": ep}])
    assert "Ok" in r
    await as_(http, srv, alice, "icrc72_delete_publication", ["a.n2"])
    (r,) = await as_(http, srv, alice, "icrc72_register_publication", [{"namespace": "a.n9"}])
    assert "Ok" in r
    admin = await admin_api(http, srv, "icrc72_register_publication", [{"namespace": f"b.n{i}"} for i in range(5)])
    assert all("Ok" in r for r in admin)
    # Limits hold across a restart (the counts are rebuilt from the store).
    srv.restart()
    async with aiohttp.ClientSession() as fresh:  # the old connections died with the server
        (r,) = await as_(fresh, srv, alice, "icrc72_register_publication", [{"namespace": "a.n10"}])
    assert limited(r, "TIDINGS_MAX_PUBLICATIONS_PER_PRINCIPAL")


BOUNDED = sorted(cfg.MAX_VALUES)


@given(st.sampled_from(BOUNDED), st.one_of(st.integers(-(2**70), 0), st.integers(1, 2**70)))
def test_every_duration_and_count_has_bounds(key: str, n: int) -> None:
    pairs = [[key, {"Nat": n}]]
    top = cfg.MAX_VALUES[key]
    read = cfg.PublicationConfig.read if key.startswith("tidings:publication") else cfg.SubscriptionConfig.read
    if 1 <= n <= top:
        read(pairs)
    else:
        with pytest.raises(cfg.ImproperConfig, match=key):
            read(pairs)


@given(st.integers(0, 2**70), st.integers(0, 2**70))
def test_skip_is_bounded(mod: int, offset: int) -> None:
    pairs = [[cfg.SKIP, {"Array": [{"Nat": mod}, {"Nat": offset}]}]]
    if 1 <= mod <= cfg.MAX_SKIP and offset <= cfg.MAX_SKIP:
        cfg.SubscriptionConfig.read(pairs)
    else:
        with pytest.raises(cfg.ImproperConfig):
            cfg.SubscriptionConfig.read(pairs)


async def test_a_subscription_waits_at_its_cap_of_unconfirmed_notifications_and_loses_nothing(
    server_factory: Callable[..., ServerProcess], http: aiohttp.ClientSession, endpoints: Any
) -> None:
    import asyncio

    from .conftest import eventually, read_body, respond

    srv = server_factory(max_unconfirmed_per_subscription="5", ack_deadline_s="60", delivery_batch_size="2")
    got: list[tuple[int, int]] = []  # (notification id, event id)

    async def never_confirms(scope: Any, receive: Any, send: Any) -> None:
        got.extend((n["id"], n["eventId"]) for n in json.loads(await read_body(receive)))
        await respond(send)

    ep = await endpoints(never_confirms)
    ns = "com.example.cap"
    await admin_api(http, srv, "icrc72_register_publication", [{"namespace": ns}])
    await admin_api(http, srv, "icrc72_register_subscription", [{"namespace": ns, "endpoint": ep.url,
                                                                 "mode": "oneshot"}])
    for i in range(20):
        await admin_api(http, srv, "icrc72_publish", [{"namespace": ns, "data": {"Nat": i}}])
    await eventually(lambda: len(got) >= 5, timeout=10)
    await asyncio.sleep(1.0)
    assert 5 <= len(got) <= 6  # the cap, give or take the batch being pushed when it was reached
    while len({e for _, e in got}) < 20:  # confirming makes room: the rest follows, in order
        seen = len(got)
        await admin_api(http, srv, "icrc72_confirm_notifications", [i for i, _ in got])
        await eventually(lambda seen=seen: len(got) > seen, timeout=10)
    events = [e for _, e in got]
    assert sorted(set(events)) == list(range(1, 21)) and events == sorted(events)


NUMERIC_SETTINGS = [f.name for f in dataclasses.fields(Settings) if f.type in ("int", "float")]


@given(st.sampled_from(NUMERIC_SETTINGS),
       st.sampled_from(["-1", "1e30", "nan", "inf", str(2**70)]))
def test_every_numeric_setting_has_bounds(name: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=f"TIDINGS_{name.upper()}"):
        Settings.from_env({f"TIDINGS_{name.upper()}": raw})


BOOL_SETTINGS = [f.name for f in dataclasses.fields(Settings) if f.type == "bool"]


@given(st.sampled_from(BOOL_SETTINGS), st.text(max_size=12))
def test_every_boolean_setting_takes_only_its_words(name: str, raw: str) -> None:
    """``TIDINGS_COMMIT_FSYNC``, ``TIDINGS_PUSH_BEFORE_RECORD`` and the rest: a word that
    is not one of the listed ones is refused, naming the variable, never read as false."""
    words = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
    key = raw.strip().lower()
    if key in words:
        assert getattr(Settings.from_env({f"TIDINGS_{name.upper()}": raw}), name) is words[key]
    else:
        with pytest.raises(ConfigError, match=f"TIDINGS_{name.upper()}"):
            Settings.from_env({f"TIDINGS_{name.upper()}": raw})


def test_the_durable_and_push_first_defaults() -> None:
    s = Settings.from_env({})
    assert s.commit_fsync is True and s.push_before_record is True
