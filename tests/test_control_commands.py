"""Registry changes travel as commands on the control-plane namespaces (control_log.py):
each goes to the broadcasters it concerns, and each broadcaster reads, from the log, the
items the others' commands name (test_cluster.py runs it between real broadcasters)."""

from __future__ import annotations

from tidings.broker.cluster import COMMAND, Commands, ControlLog, Membership
from tidings.broker.registry import Registry
from tidings.core.assignment import owner, subscription_key
from tidings.core.namespaces import system_namespace
from tidings.store import BroadcasterRecord, StoredEvent, SubscriptionRecord
from tidings.store.memory import MemoryStore


class _Delivery:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def subscription_added(self, sub: SubscriptionRecord) -> None:
        self.calls.append(("added", sub.id))

    def subscription_changed(self, sub: SubscriptionRecord, *, started: bool) -> None:
        self.calls.append(("changed", sub.id))

    def subscription_removed(self, sub_id: int) -> None:
        self.calls.append(("removed", sub_id))

    def sent_position(self, namespace: str) -> int | None:
        return None


def _member(me: str, live: list[str]) -> Membership:
    m = Membership(me, f"http://{me}", shared=True)
    m.nodes = [BroadcasterRecord(id=n, url=f"http://{n}", started_at=0, seen_ms_ago=0) for n in live]
    return m


async def test_changes_go_as_commands_to_whom_they_concern_and_are_read_back() -> None:
    store = MemoryStore()
    await store.open()
    live = ["a", "b", "c"]
    appended: list[StoredEvent] = []
    log = ControlLog(store, Registry(), _member("a", live), on_appended=appended.extend)
    delivery = _Delivery()
    commands = Commands(delivery, log)

    subs = [SubscriptionRecord(id=i, subscriber="alice", namespace="com.example.x", endpoint=None)
            for i in range(1, 41)]
    for s in subs:
        commands.subscription_added(s)
    commands.subscription_changed(subs[0], started=True)
    commands.subscription_removed(7)
    commands.publication_changed("publication:update", "com.example.x", "alice")
    await log.send()

    assert delivery.calls[:40] == [("added", i) for i in range(1, 41)]  # delivery is still told
    by_ns: dict[str, list[StoredEvent]] = {}
    for e in appended:
        assert e.source == "a"
        by_ns.setdefault(e.namespace, []).append(e)
    # A subscription's commands go to the broadcaster it is assigned to; a publication's to all.
    assert system_namespace("a") in by_ns  # what concerns itself is on the log too
    for target in ["b", "c"]:
        mine = {s.id for s in subs if owner(subscription_key(s.id), live) == target}
        reader = ControlLog(store, Registry(), _member(target, live), on_appended=lambda _: None)
        named = reader.items_named(appended)
        assert "pub:com.example.x" in named
        assert {int(n[4:]) for n in named if n.startswith("sub:")} == mine
        assert all(e.namespace == system_namespace(target) for e in by_ns[system_namespace(target)])
    # What a broadcaster sent itself it has applied already; anything else on the log is not a command.
    assert log.items_named(appended) == []
    assert all(k.startswith(COMMAND) for e in appended for k in _keys(e))


def _keys(e: StoredEvent) -> list[str]:
    import msgspec

    return [k for k, _ in msgspec.json.decode(e.data)["Map"]]
