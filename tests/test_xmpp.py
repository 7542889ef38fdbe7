"""The XMPP face against a real Prosody, driven by real slixmpp clients (docs/xmpp.md)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import aiohttp
import pytest
from slixmpp.exceptions import IqError

from .conftest import ServerProcess, admin_api, eventually, read_body, respond
from .xmpp_support import COMPONENT, ENS, PUBSUB, Client, Prosody, prosody_available

pytestmark = [
    pytest.mark.e2e,
    # CI installs Prosody (.ci/run), so there a missing one fails instead of skipping.
    pytest.mark.skipif(not prosody_available() and not os.environ.get("CI"),
                       reason="Prosody is not installed (apt-get install prosody; .ci/run does)"),
]

ORDER = "<order xmlns='urn:example:shop' id='7'><total>17</total></order>"


@pytest.fixture
def prosody(tmp_path: Path) -> Iterator[Prosody]:
    p = Prosody(tmp_path / "prosody")
    p.start()
    yield p
    p.stop()


@pytest.fixture
def xserver(server_factory: Callable[..., ServerProcess], prosody: Prosody) -> ServerProcess:
    return server_factory(retry_initial_s="0.05", retry_max_s="0.3", ack_deadline_s="2", max_attempts="500",
                          xmpp_request_timeout_s="2", **prosody.server_env())


@pytest.fixture
async def clients(prosody: Prosody) -> AsyncIterator[Callable[..., Any]]:
    made: list[Client] = []

    async def make(user: str, resource: str = "test") -> Client:
        c = Client(prosody, user, resource)
        made.append(c)
        return await c.start()

    yield make
    for c in made:
        await c.close()


async def online(client: Client) -> None:
    """Wait until the component answers (it connects after the server starts)."""
    async def ok() -> bool:
        try:
            await client.request("<query xmlns='http://jabber.org/protocol/disco#info'/>", "get", timeout=2)
            return True
        except Exception:
            return False
    await eventually(ok, timeout=20, interval=0.2)


def error_of(e: IqError) -> tuple[str, str]:
    return str(e.iq["error"]["condition"]), str(e.iq["error"]["code"])


async def test_ens_subscription_approved_by_its_publisher_and_notified(clients: Any, xserver: ServerProcess) -> None:
    alice, bob = await clients("alice"), await clients("bob")
    await online(bob)
    res = await bob.request(
        f"<subscribe xmlns='{ENS}' jid='alice@localhost/test'>"
        "<auth-info xmlns='jabber:iq:auth'>open sesame</auth-info><reliable/></subscribe>"
    )
    assert res.xml[0].tag == f"{{{ENS}}}subscribed" and res.xml[0].get("jid") == "alice@localhost/test"
    assert alice.authorise_requests == [("bob@localhost/test", "open sesame")]  # XEP-0021 §4.3
    res = await alice.request(f"<publish xmlns='{ENS}'>{ORDER}</publish>")
    assert res.xml[0].tag == f"{{{ENS}}}published"
    await eventually(lambda: bob.ens, timeout=10)
    jid, payload = bob.ens[0]
    assert jid == "alice@localhost/test"
    assert [p.tag for p in payload] == ["{urn:example:shop}order"] and payload[0].get("id") == "7"
    assert payload[0].find("{urn:example:shop}total").text == "17"  # type: ignore[union-attr]
    # Unsubscribed: no more notifications.
    res = await bob.request(f"<unsubscribe xmlns='{ENS}' jid='alice@localhost/test'/>")
    assert res.xml[0].tag == f"{{{ENS}}}unsubscribed"
    await alice.request(f"<publish xmlns='{ENS}'><n xmlns='urn:x'>2</n></publish>")
    await asyncio.sleep(0.5)
    assert len(bob.ens) == 1


@pytest.mark.parametrize(("answer", "condition", "code"), [
    (("error", 401, "not-authorized"), "not-authorized", "401"),   # copied untouched (§3.2)
    ("none", "remote-server-timeout", "504"),                      # the publisher never answers
])
async def test_a_publishers_denial_reaches_the_subscriber(
    clients: Any, xserver: ServerProcess, answer: Any, condition: str, code: str
) -> None:
    alice, bob = await clients("alice"), await clients("bob")
    await online(bob)
    alice.authorise_answer = answer
    with pytest.raises(IqError) as e:
        await bob.request(f"<subscribe xmlns='{ENS}' jid='alice@localhost/test'/>")
    assert error_of(e.value) == (condition, code)
    if code == "401":
        assert e.value.iq["error"]["text"] == "not you"


async def test_http_publish_reaches_xmpp_subscribers_with_filters_lists_and_statistics(
    clients: Any, xserver: ServerProcess, http: aiohttp.ClientSession
) -> None:
    ns = "com.example.orders"
    await admin_api(http, xserver, "icrc72_register_publication", [{"namespace": ns, "config": [
        ["icrc72:publication:subscribers:disallowed:list", {"Array": [{"Text": "xmpp:dave@localhost"}]}],
    ]}])
    bob, dave = await clients("bob"), await clients("dave")
    await online(bob)
    await bob.request(
        f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/{ns}'>"
        "<filter xmlns='urn:tidings:subscription'>total &gt; 10</filter></subscribe>"
    )
    carol = await clients("carol")  # every second event (skip), no filter
    await carol.request(
        f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/{ns}'><skip xmlns='urn:tidings:subscription'>2 1</skip>"
        "</subscribe>"
    )
    with pytest.raises(IqError) as e:  # the deny list applies to XMPP users too
        await dave.request(f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/{ns}'/>")
    assert error_of(e.value)[0] == "forbidden" and "disallowed" in str(e.value.iq["error"]["text"])
    events = [{"namespace": ns, "data": {"Map": [["total", {"Nat": t}]]}} for t in (5, 17, 3, 42)]
    assert await admin_api(http, xserver, "icrc72_publish", events)
    await eventually(lambda: len(bob.ens) == 2, timeout=10)
    await asyncio.sleep(0.3)
    assert len(bob.ens) == 2
    values = [json.loads(p[0].text or "") for _, p in bob.ens]
    assert [v["Map"][0][1]["Nat"] for v in values] == [17, 42]
    assert all(p[0].tag == "{urn:tidings:icrc16}icrc16" for _, p in bob.ens)
    await eventually(lambda: len(carol.ens) == 2, timeout=10)  # event ids 1 and 3
    assert [json.loads(p[0].text or "")["Map"][0][1]["Nat"] for _, p in carol.ens] == [5, 3]
    subs = await admin_api(http, xserver, "icrc72_get_subscriptions", {})
    mine = [s for s in subs if s["subscriber"] == "xmpp:bob@localhost"]
    assert len(mine) == 1 and mine[0]["namespace"] == ns
    # Over HTTP nobody can point a subscription at someone's XMPP address.
    (res,) = await admin_api(http, xserver, "icrc72_register_subscription", [
        {"namespace": ns, "endpoint": "xmpp:bob@localhost/test?ens"},
    ])
    assert "ImproperConfig" in res["Err"] and "xmpp:bob@localhost" in res["Err"]["ImproperConfig"]

    async def confirmed() -> bool:
        stats = await admin_api(http, xserver, "icrc72_get_subscriptions", {})
        for s in stats:
            if s["subscriber"] == "xmpp:bob@localhost":
                pairs = dict((k, v) for k, v in s.get("stats", []))
                return pairs.get("icrc72:subscription:stats:confirmations", {}).get("Nat") == 2
        return False
    await eventually(confirmed, timeout=10)


async def test_xmpp_publish_reaches_http_subscribers(
    clients: Any, xserver: ServerProcess, http: aiohttp.ClientSession, endpoints: Any
) -> None:
    alice = await clients("alice")
    await online(alice)
    got: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        got.extend(json.loads(await read_body(receive)))
        await respond(send)

    ep = await endpoints(app)
    await alice.request(f"<publish xmlns='{ENS}'><hello xmlns='urn:x'/></publish>")  # registers her namespace
    ns = "xmpp:localhost:alice:test"
    created = await admin_api(http, xserver, "tidings_create_principal", {"name": "erin"})
    async with http.post(f"{xserver.url}/v1/icrc72_register_subscription", data=json.dumps([{
        "namespace": ns, "endpoint": ep.url, "authInfo": "from http",
    }]), headers={"authorization": f"Bearer {created['token']}"}) as resp:
        assert (await resp.json())[0].get("Ok"), resp
    assert alice.authorise_requests == [(f"{COMPONENT}/principal/erin", "from http")]
    await alice.request(f"<publish xmlns='{ENS}'>{ORDER}</publish>")
    await eventually(lambda: got, timeout=10)
    assert got[0]["namespace"] == ns
    assert got[0]["data"]["Map"][0][0] == "xml"
    assert ET.fromstring(got[0]["data"]["Map"][0][1]["Text"]).get("id") == "7"


async def test_reliable_subscriptions_are_resent_until_acknowledged_and_others_end_on_error(
    clients: Any, xserver: ServerProcess, http: aiohttp.ClientSession
) -> None:
    ns = "com.example.reliable"
    await admin_api(http, xserver, "icrc72_register_publication", [{"namespace": ns}])
    bob, carol = await clients("bob"), await clients("carol")
    await online(bob)
    await bob.request(f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/{ns}'><reliable/></subscribe>")
    await carol.request(f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/{ns}'/>")  # not reliable
    bob.ens_answer = carol.ens_answer = "service-unavailable"
    await admin_api(http, xserver, "icrc72_publish", [{"namespace": ns, "data": {"Nat": 1}}])
    await asyncio.sleep(1.0)
    bob.ens_answer = "result"
    await eventually(lambda: bob.ens, timeout=10)  # resent until acknowledged (§3.6)

    async def carol_ended() -> bool:
        subs = await admin_api(http, xserver, "icrc72_get_subscriptions", {})
        return not [s for s in subs if s["subscriber"] == "xmpp:carol@localhost"]
    await eventually(carol_ended, timeout=10)  # §3.5: an error ends a plain subscription
    carol.ens_answer = "result"
    await admin_api(http, xserver, "icrc72_publish", [{"namespace": ns, "data": {"Nat": 2}}])
    await eventually(lambda: len(bob.ens) == 2, timeout=10)
    assert carol.ens == []


async def test_a_reliable_subscriber_that_refuses_some_of_a_group_gets_only_those_again(
    clients: Any, xserver: ServerProcess, http: aiohttp.ClientSession
) -> None:
    # Each notification is its own iq and its own acknowledgement: an error to one of a
    # group is no error to the others (all ten came again, under new iq ids, before).
    ns = "com.example.group"
    await admin_api(http, xserver, "icrc72_register_publication", [{"namespace": ns}])
    bob = await clients("bob")
    await online(bob)
    await bob.request(f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/{ns}'><reliable/></subscribe>")
    refused = {0, 4, 7}
    bob.refuse_once = {json.dumps({"Nat": i}, separators=(",", ":")): "service-unavailable" for i in refused}
    res = await admin_api(http, xserver, "icrc72_publish", [{"namespace": ns, "data": {"Nat": i}} for i in range(10)])
    ids = [r["Ok"][0] for r in res]
    await eventually(lambda: sum(answer == "result" for _, answer, _ in bob.ens_log) >= 10, timeout=15)
    await asyncio.sleep(1.0)  # room for any push that should not come
    log = bob.ens_log
    assert len(log) == 10 + len(refused), log
    event_id, notification_id = "{urn:tidings:notification}eventId", "{urn:tidings:notification}id"
    answered = [int(attrs[event_id]) for _, answer, attrs in log if answer == "result"]
    assert sorted(answered) == sorted(ids)  # each event acknowledged exactly once
    first_refused = [(iq_id, attrs) for iq_id, answer, attrs in log if answer != "result"]
    assert sorted(int(a[event_id]) for _, a in first_refused) == sorted(ids[i] for i in refused)
    for iq_id, attrs in first_refused:  # a repeat is recognisable: the same iq id and ids
        (again,) = [a for i, answer, a in log if i == iq_id and answer == "result"]
        assert again == attrs
    assert len({attrs[notification_id] for _, _, attrs in log}) == 10


async def test_the_longest_integers_reach_xmpp_subscribers_exactly(
    clients: Any, xserver: ServerProcess, http: aiohttp.ClientSession
) -> None:
    # ICRC-16 integers reach 4,300 digits (core.long_ints); over XMPP they travel as the
    # <icrc16> JSON text, and come out as they went in. (An XMPP publish carries XML,
    # which holds no ICRC-16 integer to refuse.)
    ns = "com.example.long"
    await admin_api(http, xserver, "icrc72_register_publication", [{"namespace": ns}])
    bob = await clients("bob")
    await online(bob)
    await bob.request(f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/{ns}'><reliable/></subscribe>")
    longest = {"Map": [["n", {"Nat": int("9" * 4300)}], ["i", {"Int": -int("9" * 4299)}]]}
    (res,) = await admin_api(http, xserver, "icrc72_publish", [{"namespace": ns, "data": longest}])
    assert "Ok" in res, res
    await eventually(lambda: bob.ens, timeout=10)
    (_, payload), = bob.ens
    assert json.loads(payload[0].text or "") == longest


async def test_xep0060_clients_discover_subscribe_publish_and_get_items(
    clients: Any, xserver: ServerProcess, http: aiohttp.ClientSession
) -> None:
    ns = "com.example.feed"
    await admin_api(http, xserver, "icrc72_register_publication", [{"namespace": ns}])
    carol, dave = await clients("carol"), await clients("dave")
    for c in (carol, dave):
        c.register_plugin("xep_0030")
        c.register_plugin("xep_0060")
    await online(carol)
    items = await carol.plugin["xep_0030"].get_items(jid=COMPONENT, timeout=10)
    assert ns in [node for _, node, _ in items["disco_items"]["items"]]
    info = await carol.plugin["xep_0030"].get_info(jid=COMPONENT, timeout=10)
    assert PUBSUB in info["disco_info"]["features"]
    res = await carol.plugin["xep_0060"].subscribe(COMPONENT, ns, timeout=10)
    assert res["pubsub"]["subscription"]["subscription"] == "subscribed"
    await admin_api(http, xserver, "icrc72_publish", [{"namespace": ns, "data": {"Text": "hi"}}])
    await eventually(lambda: carol.items, timeout=10)
    assert carol.items[0][:2] == (ns, "1")
    # Publishing to one's own node with the standard client; a subscriber of it gets it.
    own = "xmpp:localhost:dave:test"
    payload = ET.fromstring("<entry xmlns='urn:example:feed'>news</entry>")
    res = await dave.plugin["xep_0060"].publish(COMPONENT, own, payload=payload, timeout=10)
    assert res["pubsub"]["publish"]["item"]["id"] == "1"
    await carol.plugin["xep_0060"].subscribe(COMPONENT, own, timeout=10)  # dave approves (his client does)
    await dave.plugin["xep_0060"].publish(COMPONENT, own, payload=payload, timeout=10)
    await eventually(lambda: any(n == own for n, _, _ in carol.items), timeout=10)
    _, item_id, body = next(i for i in carol.items if i[0] == own)
    assert item_id == "2" and body[0].tag == "{urn:example:feed}entry" and body[0].text == "news"
    # An item id the publisher gives is the event's idempotency key: sent again, the same event.
    first = await dave.plugin["xep_0060"].publish(COMPONENT, own, id="entry-9", payload=payload, timeout=10)
    again = await dave.plugin["xep_0060"].publish(COMPONENT, own, id="entry-9", payload=payload, timeout=10)
    assert first["pubsub"]["publish"]["item"]["id"] == again["pubsub"]["publish"]["item"]["id"] == "3"
    await carol.plugin["xep_0060"].unsubscribe(COMPONENT, ns, timeout=10)
    await admin_api(http, xserver, "icrc72_publish", [{"namespace": ns, "data": {"Text": "again"}}])
    await asyncio.sleep(0.5)
    assert [i for i in carol.items if i[0] == ns] == [carol.items[0]]


@pytest.mark.parametrize(("xml", "type_", "condition"), [
    (f"<subscribe xmlns='{ENS}'/>", "set", "bad-request"),                          # no jid
    (f"<subscribe xmlns='{ENS}' jid='a b@localhost'/>", "set", "bad-request"),      # not a JID
    (f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/no..such'/>", "set", "bad-request"),
    (f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/com.unknown'/>", "set", "item-not-found"),
    (f"<subscribe xmlns='{ENS}' jid='x@localhost'/>", "get", "bad-request"),         # wrong iq type
    (f"<subscribe xmlns='{ENS}' jid='x@localhost'><skip xmlns='urn:tidings:subscription'>-1</skip></subscribe>",
     "set", "bad-request"),
    (f"<publish xmlns='{ENS}' jid='bob@localhost/test'/>", "set", "forbidden"),       # another's event
    ("<frobnicate xmlns='urn:unknown'/>", "set", "feature-not-implemented"),
    ("<frobnicate/>", "get", "bad-request"),
    (f"<pubsub xmlns='{PUBSUB}'><subscribe node='com.x' jid='bob@localhost/test'/></pubsub>", "set",
     "bad-request"),                                                                  # subscribing someone else
    (f"<pubsub xmlns='{PUBSUB}'><subscribe/></pubsub>", "set", "bad-request"),
    (f"<pubsub xmlns='{PUBSUB}'><items node='x'/></pubsub>", "get", "feature-not-implemented"),
    (f"<pubsub xmlns='{PUBSUB}'><publish node='xmpp:localhost:bob:test'><item/></publish></pubsub>", "set",
     "forbidden"),
])
async def test_bad_stanzas_get_xmpp_errors_and_never_stall_the_component(
    clients: Any, xserver: ServerProcess, xml: str, type_: str, condition: str
) -> None:
    alice = await clients("alice")
    await online(alice)
    with pytest.raises(IqError) as e:
        await alice.request(xml, type_)
    assert error_of(e.value)[0] == condition
    # Still serving: a good request right after.
    res = await alice.request(f"<publish xmlns='{ENS}'><ok xmlns='urn:x'/></publish>")
    assert res.xml[0].tag == f"{{{ENS}}}published"


@pytest.mark.parametrize("wrap", [
    lambda deep: f"<publish xmlns='{ENS}'>{deep}</publish>",
    lambda deep: f"<pubsub xmlns='{PUBSUB}'><publish node='xmpp:localhost:alice:test'><item>{deep}</item></publish>"
                 "</pubsub>",
], ids=["ens", "xep-0060"])
async def test_a_payload_nested_thousands_deep_is_not_acceptable(
    clients: Any, xserver: ServerProcess, wrap: Any
) -> None:
    # slixmpp writes elements out by recursion: stored as it came, such a payload raised
    # RecursionError in the component, and would again in every push of it.
    alice = await clients("alice")
    await online(alice)
    deep = "<a xmlns='urn:x'>" * 3000 + "</a>" * 3000
    with pytest.raises(IqError) as e:
        await alice.request_raw(wrap(deep))
    assert error_of(e.value)[0] == "not-acceptable"
    res = await alice.request(f"<publish xmlns='{ENS}'><ok xmlns='urn:x'/></publish>")
    assert res.xml[0].tag == f"{{{ENS}}}published"
    assert "Traceback" not in (xserver.data_dir / "server.log").read_text()


async def test_a_forged_from_does_not_act_as_another_user(clients: Any, xserver: ServerProcess,
                                                          http: aiohttp.ClientSession) -> None:
    alice, bob = await clients("alice"), await clients("bob")
    await online(alice)
    iq = alice.make_iq_set(ito=COMPONENT, ifrom="bob@localhost/test")
    iq.xml.append(ET.fromstring(f"<publish xmlns='{ENS}'><forged xmlns='urn:x'/></publish>"))
    try:  # the XMPP server stamps the sender's real address (or refuses the stanza)
        await iq.send(timeout=3)
    except IqError:
        pass
    pubs = [p["namespace"] for p in await admin_api(http, xserver, "icrc72_get_publications", {})]
    assert "xmpp:localhost:bob:test" not in pubs
    assert bob.online.is_set()


async def test_restarting_the_xmpp_server_loses_nothing_acknowledged(
    clients: Any, xserver: ServerProcess, http: aiohttp.ClientSession, prosody: Prosody
) -> None:
    ns = "com.example.restart"
    await admin_api(http, xserver, "icrc72_register_publication", [{"namespace": ns}])
    bob = await clients("bob")
    await online(bob)
    await bob.request(f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/{ns}'><reliable/></subscribe>")
    await admin_api(http, xserver, "icrc72_publish", [{"namespace": ns, "data": {"Nat": i}} for i in range(3)])
    await eventually(lambda: len(bob.ens) == 3, timeout=10)
    prosody.stop()
    for i in range(3, 10):  # acknowledged while the XMPP server is down
        (res,) = await admin_api(http, xserver, "icrc72_publish", [{"namespace": ns, "data": {"Nat": i}}])
        assert "Ok" in res
    prosody.start()
    await eventually(lambda: len({p[0].text for _, p in bob.ens}) == 10, timeout=40, interval=0.2)
    seen = [json.loads(p[0].text or "")["Nat"] for _, p in bob.ens]
    assert sorted(set(seen)) == list(range(10))
    firsts = list(dict.fromkeys(seen))
    assert firsts == sorted(firsts)  # in order; repeats only as whole re-sends


async def test_an_xmpp_subscriber_that_keeps_refusing_is_dead_lettered_as_on_http(
    clients: Any, server_factory: Callable[..., ServerProcess], prosody: Prosody, http: aiohttp.ClientSession
) -> None:
    srv = server_factory(retry_initial_s="0.05", retry_max_s="0.1", max_attempts="2", **prosody.server_env())
    ns = "com.example.dead"
    await admin_api(http, srv, "icrc72_register_publication", [{"namespace": ns}])
    bob = await clients("bob")
    await online(bob)
    await bob.request(f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/{ns}'><reliable/></subscribe>")
    bob.ens_answer = "internal-server-error"
    await admin_api(http, srv, "icrc72_publish", [{"namespace": ns, "data": {"Nat": 7}}])

    async def dead() -> list[Any]:
        return [d for d in await admin_api(http, srv, "tidings_get_dead_letters", {})
                if d.get("namespace") == ns]
    (letter,) = await eventually(dead, timeout=15)
    assert letter["reason"] == "attempts_exhausted" and letter["attempts"] == 2
    # Redriven once the subscriber answers again: delivered, as on HTTP.
    bob.ens_answer = "result"
    await admin_api(http, srv, "tidings_redrive_dead_letters", [letter["id"]])
    await eventually(lambda: bob.ens, timeout=10)


async def test_a_component_with_a_wrong_secret_says_so_once_and_backs_off(
        server_factory: Callable[..., ServerProcess], prosody: Prosody) -> None:
    """The server refuses the component (not-authorized): one clear line in the log, and
    tries slow down (1 s doubling to 60 s) instead of one every half second for ever."""
    s = server_factory(**{**prosody.server_env(), "xmpp_secret": "not-" + prosody.secret})
    await asyncio.sleep(8)
    log = (s.data_dir / "server.log").read_text()
    told = [line for line in log.splitlines() if "refused the component" in line]
    assert len(told) == 1, log
    assert "not-authorized" in told[0] and f"127.0.0.1:{prosody.component_port}" in told[0]
    assert "TIDINGS_XMPP_SECRET" in told[0] and prosody.secret not in log
    tries = (prosody.dir / "prosody.log").read_text().count("Component authentication failed")
    assert 2 <= tries <= 6, tries  # 1, 2, 4 s apart (jittered down to half); was 16 in 8 s


async def test_the_events_trace_context_reaches_ens_and_pubsub_subscribers(
    clients: Any, xserver: ServerProcess, http: aiohttp.ClientSession
) -> None:
    """An ENS notification carries it as attributes of ``<publish>``, a pubsub one as
    XEP-0131 headers of its ``<message>``; an event without one (or with a malformed one)
    carries neither (docs/xmpp.md, "Trace context")."""
    ns = "com.example.traced"
    parent, state = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "v=1"
    await admin_api(http, xserver, "icrc72_register_publication", [{"namespace": ns}])
    bob, carol = await clients("bob"), await clients("carol")
    carol.register_plugin("xep_0060")
    await online(bob)
    await bob.request(f"<subscribe xmlns='{ENS}' jid='{COMPONENT}/{ns}'/>")
    await carol.plugin["xep_0060"].subscribe(COMPONENT, ns, timeout=10)
    async with http.post(f"{xserver.url}/v1/icrc72_publish", data=json.dumps([
        {"namespace": ns, "data": {"Nat": 1}},
        {"namespace": ns, "data": {"Nat": 2}, "headers": [["traceparent", {"Text": "00-bad\r\nx: y"}]]},
    ]), headers={"authorization": f"Bearer {xserver.admin_token}", "traceparent": parent,
                 "tracestate": state}) as r:
        assert r.status == 200, await r.text()
    await admin_api(http, xserver, "icrc72_publish", [{"namespace": ns, "data": {"Nat": 3}}])
    await eventually(lambda: len(bob.ens_log) >= 3 and len(carol.item_messages) >= 3, timeout=10)
    notification = "{urn:tidings:notification}"
    attrs = {int(a[f"{notification}eventId"]): a for _, _, a in bob.ens_log}
    assert attrs[1][f"{notification}traceparent"] == parent and attrs[1][f"{notification}tracestate"] == state
    assert f"{notification}traceparent" not in attrs[2] and f"{notification}traceparent" not in attrs[3]
    shim = "{http://jabber.org/protocol/shim}"
    headers = {}
    for m in carol.item_messages:
        item = m.find(".//{http://jabber.org/protocol/pubsub#event}item")
        assert item is not None
        headers[int(item.get("id", ""))] = {h.get("name"): h.text for h in m.findall(f"{shim}headers/{shim}header")}
    assert headers == {1: {"traceparent": parent, "tracestate": state}, 2: {}, 3: {}}
