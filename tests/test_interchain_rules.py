"""The pure rules of the distributor (tidings.core.interchain) and its config file."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.global_id import escape_global_id
from tidings.core.interchain import (
    DltPublish,
    DltSubscribe,
    InvalidEvent,
    NetworkNotification,
    global_id,
    matches,
    notification_of,
    publish_body_of,
    strip_network,
    validate_publish,
)
from tidings.errors import ConfigError
from tidings.interchain.config import load

from .interchain_support import event


def body(**changes: object) -> DltPublish:
    return msgspec.convert({**event(1), **changes}, DltPublish)


@pytest.mark.parametrize(("location", "gid"), [
    ("https://h/api/v1/entities/urn:1?hl=abc", "abc"),
    ("https://h/e?x=1&hl=abc&y=2", "abc"),
    ("https://h/e?hl=a%2Fb%20c#frag", "a/b c"),
    ("https://h/e?h%6C=zz", "zz"),
])
def test_global_id_is_the_hl_parameter(location: str, gid: str) -> None:
    assert global_id(location) == gid


@pytest.mark.parametrize("location", ["https://h/e", "https://h/e?hl=", "https://h/e?hlx=1", "https://h/e#?hl=1"])
def test_no_hl_is_refused_with_a_stable_code(location: str) -> None:
    with pytest.raises(InvalidEvent) as e:
        global_id(location)
    assert e.value.code == "missing_global_id"


def test_publish_body_rules() -> None:
    assert validate_publish(body()) == "1"
    for bad in ({"eventType": ""}, {"eventType": "x" * 256}, {"entityId": "0x12"}, {"previousEntityHash": "ab"}):
        with pytest.raises(msgspec.ValidationError):
            body(**bad)
    with pytest.raises(InvalidEvent):
        validate_publish(body(dataLocation="not a uri?hl=1"))
    assert body(eventType="x" * 255).eventType == "x" * 255
    # relevantMetadata defaults to []; an unknown field (a network parameter) is dropped.
    raw = {k: v for k, v in event(2).items() if k != "relevantMetadata"}
    decoded = msgspec.json.decode(json.dumps({**raw, "network": "A"}), type=DltPublish)
    assert decoded.relevantMetadata == [] and b"network" not in msgspec.json.encode(decoded)


def test_matching_star_types_and_metadata() -> None:
    def sub(types: list[str], meta: list[str] | None = None) -> DltSubscribe:
        return DltSubscribe(eventTypes=types, metadata=meta or [], notificationEndpoint="http://x/")

    assert matches(sub(["*"]), "Anything", [])
    assert matches(sub(["ProductOffering", "Catalog"]), "Catalog", ["sbx"])
    assert not matches(sub(["ProductOffering"]), "Catalog", ["sbx"])
    assert matches(sub(["*"], ["sbx", "dev"]), "Catalog", ["dev"])
    assert not matches(sub(["*"], ["prd"]), "Catalog", ["sbx"])
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"eventTypes": [], "notificationEndpoint": "http://x/"}, DltSubscribe)


def test_network_is_stripped_for_consumers_and_republication() -> None:
    b = body()
    n = notification_of(b, id=7, timestamp=123, network="hashnet")
    assert n.network == "hashnet"
    plain = msgspec.to_builtins(strip_network(n))
    assert "network" not in plain and plain["id"] == 7 and plain["entityIdHash"] == b.entityId
    again = publish_body_of(msgspec.convert({**msgspec.to_builtins(n)}, NetworkNotification))
    assert again == b
    broken = NetworkNotification(eventType="T", dataLocation="https://h/e?hl=1", network="x")
    with pytest.raises(InvalidEvent):
        publish_body_of(broken)


def test_config_file(tmp_path: Path) -> None:
    p = tmp_path / "d.toml"
    p.write_text('port = 9000\nsqlite = "state.db"\n[[networks]]\nname = "A"\nkind = "dlt"\nurl = "http://a"\n'
                 '[[networks]]\nname = "R"\nkind = "redis"\nstream = "s"\n')
    c = load(p)
    assert c.port == 9000 and c.sqlite == tmp_path / "state.db" and c.url == "http://127.0.0.1:9000"
    assert [(n.name, n.kind, n.params) for n in c.networks] == [("A", "dlt", {"url": "http://a"}),
                                                                 ("R", "redis", {"stream": "s"})]
    assert load(p, port=1, redis="redis://x").redis == "redis://x"
    for text in ('[[networks]]\nname = "A"\nkind = "nope"\n', "port = 1\n",
                 '[[networks]]\nname = "A"\nkind = "dlt"\n[[networks]]\nname = "A"\nkind = "dlt"\n',
                 'colour = 1\n[[networks]]\nname = "A"\nkind = "dlt"\n'):
        p.write_text(text)
        with pytest.raises(ConfigError):
            load(p)


def test_public_surface_is_pinned() -> None:
    import tidings.interchain as ic
    from tidings.interchain.adapters import KINDS, Network
    from tidings.interchain.state import State

    assert set(ic.__all__) == {"KINDS", "Distributor", "DistributorConfig", "Network", "NetworkContext",
                               "Subscription", "load"}
    assert set(KINDS) == {"dlt", "tidings", "jetstream", "redis"}
    assert Network.__abstractmethods__ == {"publish", "follow", "events"}
    assert State.__abstractmethods__ == {"mark", "members", "peek", "pop", "outbox_size", "save_subscription",
                                         "subscriptions", "get_cursor", "set_cursor"}


@given(st.text(min_size=1).filter(lambda g: not any(0xD800 <= ord(c) <= 0xDFFF for c in g)))
def test_an_escaped_global_id_is_ascii_and_reads_back_through_the_rule(gid: str) -> None:
    escaped = escape_global_id(gid)
    assert escaped.isascii() and escaped.isprintable() and not set(escaped) & set(" \r\n:&=#?+")
    assert global_id("https://h/e?x=1&hl=" + escaped + "#f") == gid
