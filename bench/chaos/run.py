"""The fault-injection run: N broadcasters on a primary PostgreSQL with a synchronous
streaming standby, publishers and subscribers running, and a schedule of faults (kill,
pause, database restart, failover, member-to-database and member-to-member partitions).
Afterwards it checks what a cluster must keep whatever happens (docs/scaling.md,
"Failure model")."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import asyncpg

from ._members import Member
from ._pg import PgNode, base_dir
from ._proxy import Proxy
from ._world import Publishers, Recorder

__all__ = ["KINDS", "Chaos", "Fault", "FaultResult", "Report", "random_schedule"]

KINDS = ("pause", "kill", "db-partition", "peer-partition", "db-restart-fast", "db-restart-immediate", "db-failover")
FAST = {"heartbeat_s": "0.25", "lease_s": "1.5", "store_timeout_s": "2", "forward_timeout_s": "0.5",
        "retry_initial_s": "0.05", "retry_max_s": "0.5", "log_level": "info"}


@dataclass
class Fault:
    kind: str
    duration_s: float = 4.0
    target: int = 0
    """The member it strikes (member faults)."""


@dataclass
class FaultResult:
    kind: str
    target: str
    duration_s: float
    publish_gap_s: float
    """The longest time no publish was answered Ok through a member the fault did not
    strike (every member, for database faults), from the fault's start to its end."""
    publish_bound_s: float
    takeover_s: float | None = None
    """Until every subscription the struck member delivered got a push of an event
    published after the fault began (member faults)."""
    takeover_bound_s: float | None = None
    aimed: bool = False
    """A pause that landed while the member's session held a lock in the database."""
    kept_gap_s: float | None = None
    """The longest time a subscription the other members delivered went without a push,
    from the fault's start to its end (member faults): they keep their share."""
    kept_bound_s: float = 2.0

    @property
    def ok(self) -> bool:
        return self.publish_gap_s <= self.publish_bound_s and (
            self.takeover_s is None or self.takeover_bound_s is None or self.takeover_s <= self.takeover_bound_s
        ) and (self.kept_gap_s is None or self.kept_gap_s <= self.kept_bound_s)


@dataclass
class Report:
    faults: list[FaultResult] = field(default_factory=list)
    acked: int = 0
    lost: int = 0
    """Events answered Ok missing from at least one subscription of their namespace."""
    lost_in_store: int = 0
    """Events answered Ok missing from the database after every fault."""
    id_gaps: int = 0
    """Namespaces whose event ids are not 1..n without gaps or repeats."""
    out_of_order: int = 0
    """Subscriptions whose first deliveries are not in event order."""
    overlaps: int = 0
    stale_pushes: int = 0
    fenced_writes: int = 0
    """Writes the store refused to a member under a lease it had lost (counted, not a failure)."""
    server_errors: int = 0
    """Publishes answered 5xx other than 503 with Retry-After."""
    pushes: int = 0
    logical: int = 0
    """Logical events published (each with its idempotency key, retried until answered)."""
    repeats: int = 0
    """Retries answered as repeats of an event stored before (their first answer was lost)."""
    duplicates: int = 0
    """Logical events stored more than once."""
    wrong_ids: int = 0
    """Logical events answered with an id that is not where the event is, or with two ids."""
    unsettled: int = 0
    """Logical events never answered (in flight when the publishers stopped)."""
    details: list[str] = field(default_factory=list)
    """What the members said about each subscription with events missing, to explain it."""

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.lost_in_store == 0 and self.id_gaps == 0 and self.out_of_order == 0
                and self.duplicates == 0 and self.wrong_ids == 0 and self.overlaps == 0 and self.stale_pushes == 0
                and self.server_errors == 0
                and all(f.ok for f in self.faults))

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        for f, r in zip(d["faults"], self.faults, strict=True):
            f["ok"] = r.ok
        return d

    def lines(self) -> list[str]:
        out = [f"{'fault':<22}{'member':<8}{'for':>6}{'publish gap':>13}{'bound':>7}{'takeover':>10}{'bound':>7}"
               f"{'others':>8}  ok"]
        for f in self.faults:
            take = "" if f.takeover_s is None else f"{f.takeover_s:.2f}"
            tb = "" if f.takeover_bound_s is None else f"{f.takeover_bound_s:.1f}"
            kind = f.kind + (" (aimed)" if f.aimed else "")
            out.append(f"{kind:<22}{f.target:<8}{f.duration_s:>6.1f}{f.publish_gap_s:>13.2f}{f.publish_bound_s:>7.1f}"
                       f"{take:>10}{tb:>7}{'' if f.kept_gap_s is None else f'{f.kept_gap_s:.2f}':>8}"
                       f"  {'yes' if f.ok else 'NO'}")
        out.append(
            f"acked {self.acked}, lost {self.lost} (in the store {self.lost_in_store}), id gaps {self.id_gaps}, "
            f"out of order {self.out_of_order}, overlapping pushes {self.overlaps}, stale pushes {self.stale_pushes}, "
            f"writes refused by their fence {self.fenced_writes}, 5xx {self.server_errors}, pushes {self.pushes}; "
            f"logical events {self.logical} (answered as repeats {self.repeats}), stored twice {self.duplicates}, "
            f"wrong ids {self.wrong_ids}, unanswered at stop {self.unsettled}: {'OK' if self.ok else 'FAILED'}"
        )
        return out + self.details


def random_schedule(n: int, seed: int, members: int) -> list[Fault]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rng.choice(KINDS)
        duration = rng.choice((2.0, 3.0, 5.0, 8.0, 15.0)) if kind == "pause" else rng.uniform(2.0, 6.0)
        out.append(Fault(kind, round(duration, 1), rng.randrange(members)))
    return out


class Chaos:
    def __init__(self, members: int = 3, namespaces: int = 6, subs_per_namespace: int = 2,
                 settings: dict[str, str] | None = None, publishers_per_member: int = 2) -> None:
        self.n = members
        self.n_ns = namespaces
        self.subs_per_ns = subs_per_namespace
        self.settings = {**FAST, **(settings or {})}
        self.lease_s = float(self.settings["lease_s"])
        self.heartbeat_s = float(self.settings["heartbeat_s"])
        self.publishers_per_member = publishers_per_member
        self.namespaces = [f"com.example.chaos.n{i}" for i in range(namespaces)]
        self.sub_ns: dict[int, str] = {}
        self.report = Report()
        self.keep_on_failure = True
        self.missing: dict[int, int] = {}
        """Per subscription: events answered Ok it never got."""

    # -- set up and tear down ----------------------------------------------------------

    async def __aenter__(self) -> Chaos:
        self.root = base_dir()
        self.pg = [PgNode(self.root / "pg-a"), PgNode(self.root / "pg-b")]
        self.primary, self.standby = self.pg
        await asyncio.to_thread(self.primary.init, synchronous=True)
        await asyncio.to_thread(self.primary.start)
        await asyncio.to_thread(self._attach_standby)
        self.members: list[Member] = []
        for i in range(self.n):
            proxies = [await Proxy(p.port).start() for p in self.pg]
            m = Member(f"b{i}", self.root, proxies, self.settings)
            await m.peer.start()
            self.members.append(m)
        await asyncio.to_thread(self.members[0].start)
        for m in self.members[1:]:
            m.share_token(self.members[0])
            await asyncio.to_thread(m.start)
        self.recorder = Recorder()
        self.endpoint = await self.recorder.start()
        await self._register()
        await self._until_all_held(60)
        self.publishers = Publishers(self.members, self.namespaces, per_member=self.publishers_per_member)
        self.publishers.start()
        return self

    def _attach_standby(self) -> None:
        self.standby.standby_of(self.primary)
        self.standby.start()
        self.primary.wait_streaming()
        self.primary.synchronous(True)

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.publishers.stop()
        for m in self.members:
            await asyncio.to_thread(m.stop)
            for p in (*m.db, m.peer):
                await p.close()
        await self.recorder.close()
        for node in self.pg:
            await asyncio.to_thread(node.stop, "immediate")
        if self.report.ok or not self.keep_on_failure:
            import shutil

            shutil.rmtree(self.root, ignore_errors=True)
        else:
            print(f"the members' logs and the databases are kept in {self.root}")

    async def _call(self, m: Member, method: str, body: Any) -> Any:
        async with aiohttp.ClientSession() as http, http.post(
            f"{m.url}/v1/{method}", json=body, headers={"authorization": f"Bearer {m.token}"},
            timeout=aiohttp.ClientTimeout(total=20),
        ) as r:
            if r.status != 200:
                raise RuntimeError(f"{m.name} {method}: {r.status} {await r.text()}")
            return await r.json()

    async def _register(self) -> None:
        for k, ns in enumerate(self.namespaces):
            await self._call(self.members[k % self.n], "icrc72_register_publication", [{"namespace": ns}])
        k = 0
        for ns in self.namespaces:
            for _ in range(self.subs_per_ns):
                (item,) = await self._call(self.members[k % self.n], "icrc72_register_subscription",
                                           [{"namespace": ns, "endpoint": self.endpoint}])
                self.sub_ns[item["Ok"]] = ns
                k += 1

    async def holders(self) -> dict[int, str]:
        """Subscription -> the member delivering it, as each running member says."""
        out: dict[int, str] = {}
        for m in self.members:
            if m.proc is None or m.paused:
                continue
            with contextlib.suppress(Exception):
                for info in await self._call(m, "icrc72_get_broadcaster_subscriptions", {}):
                    out[int(info["id"])] = m.name
        return out

    async def _until_all_held(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if set(await self.holders()) >= set(self.sub_ns):
                return
            await asyncio.sleep(0.2)
        raise RuntimeError("not every subscription is delivered by a member")

    # -- faults --------------------------------------------------------------------------

    async def run(self, schedule: list[Fault], *, between_s: float = 2.0,
                  on_fault: Any = None) -> Report:
        await asyncio.sleep(between_s)
        for fault in schedule:
            result = await self._strike(fault)
            self.report.faults.append(result)
            if on_fault is not None:
                on_fault(result)
            await asyncio.sleep(between_s)
        await self._finish()
        return self.report

    async def _strike(self, f: Fault) -> FaultResult:
        m = self.members[f.target % self.n]
        member_fault = f.kind in ("pause", "kill", "db-partition")
        healthy = {x.name for x in self.members if x is not m} if member_fault else {x.name for x in self.members}
        held = await self.holders() if member_fault else {}
        theirs = [s for s, b in held.items() if b == m.name]
        kept = [s for s, b in held.items() if b != m.name]
        marks = self._marks()
        aimed = False
        start = time.monotonic()
        if f.kind == "pause":
            aimed = await self._aim(m)
            marks = self._marks()
            m.pause()
            start = time.monotonic()
            await asyncio.sleep(f.duration_s)
            m.resume()
        elif f.kind == "kill":
            m.kill()
            await asyncio.sleep(f.duration_s)
            await asyncio.to_thread(m.start)
        elif f.kind == "db-partition":
            for p in m.db:
                p.partition()
            await asyncio.sleep(f.duration_s)
            for p in m.db:
                p.heal()
        elif f.kind == "peer-partition":
            m.peer.partition()
            await asyncio.sleep(f.duration_s)
            m.peer.heal()
        elif f.kind.startswith("db-restart"):
            mode = f.kind.rsplit("-", 1)[1]
            await asyncio.to_thread(self.primary.stop, mode)
            await asyncio.sleep(min(f.duration_s, 3.0))
            await asyncio.to_thread(self.primary.start)
        elif f.kind == "db-failover":
            await asyncio.to_thread(self.primary.stop, "immediate")
            await asyncio.to_thread(self.standby.promote)
            self.primary, self.standby = self.standby, self.primary
        end = time.monotonic()
        if f.kind == "db-failover":
            # A new standby for the next failover (the new primary waits for none meanwhile).
            await asyncio.to_thread(self._attach_standby)
        publish_bound = 2.0 if member_fault or f.kind == "peer-partition" else (end - start) + 5.0
        gap_end = end + (0 if member_fault or f.kind == "peer-partition" else 5.0)
        await asyncio.sleep(max(0.0, gap_end - time.monotonic()))
        result = FaultResult(
            f.kind, m.name if f.kind in ("pause", "kill", "db-partition", "peer-partition") else "-", end - start,
            self.publishers.longest_gap(start, gap_end, healthy), publish_bound, aimed=aimed,
        )
        if kept:
            result.kept_gap_s = max(self._push_gap(s, start, end) for s in kept)
        if theirs:
            result.takeover_bound_s = self.lease_s + 2 * self.heartbeat_s + 1.0
            result.takeover_s = await self._takeover(theirs, marks, start, result.takeover_bound_s + 10)
        return result

    async def _aim(self, m: Member) -> bool:
        """Wait (up to 2 s) until ``m``'s database session holds a lock, so the pause lands
        on the worst instruction: whatever it holds then, the others must not wait for."""
        try:
            conn = await asyncpg.connect(self.primary.dsn, timeout=5)
        except Exception:
            return False
        try:
            end = time.monotonic() + 2
            while time.monotonic() < end:
                held = await conn.fetchval(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE a.application_name = $1 AND l.granted AND (l.locktype IN ('tuple', 'transactionid') "
                    "OR a.state = 'idle in transaction')", f"tidings {m.name}",
                )
                if held:
                    return True
                await asyncio.sleep(0.002)
            return False
        finally:
            await conn.close()

    def _push_gap(self, sub: int, start: float, end: float) -> float:
        """The longest time within ``[start, end]`` in which ``sub`` got no new event."""
        times = sorted(t for (s, _, _), t in self.recorder.first_at.items() if s == sub and start <= t <= end)
        marks = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(marks))

    def _marks(self) -> dict[str, int]:
        """The highest id answered Ok so far, per namespace."""
        out: dict[str, int] = {}
        for ns, i in self.publishers.acked:
            out[ns] = max(out.get(ns, 0), i)
        return out

    async def _takeover(self, subs: list[int], marks: dict[str, int], start: float, timeout: float) -> float:
        """How long after ``start`` every one of ``subs`` had an event published after
        ``marks`` pushed to it."""
        end = time.monotonic() + timeout
        while True:
            firsts = []
            for s in subs:
                ns = self.sub_ns[s]
                ts = [t for (sub, n, i), t in self.recorder.first_at.items()
                      if sub == s and n == ns and i > marks.get(ns, 0)]
                firsts.append(min(ts) if ts else None)
            if all(t is not None for t in firsts):
                return max(0.0, max(t for t in firsts if t is not None) - start)
            if time.monotonic() > end:
                return float("inf")
            await asyncio.sleep(0.2)

    async def _explain(self, acked: set[tuple[str, int]]) -> list[str]:
        """For each subscription with events missing: what it lacks, who delivers it now,
        and the last lines each member logged about it (a failed run's output says why
        without the kept folder, which a CI machine does not keep)."""
        holders = await self.holders()
        out = []
        for s, n in sorted(self.missing.items()):
            if not n:
                continue
            ns = self.sub_ns[s]
            got = {i for x, i in self.recorder.got[s] if x == ns}
            gone = sorted(i for x, i in acked if x == ns and i not in got)
            last_at = max((t for (sub, _, _), t in self.recorder.first_at.items() if sub == s), default=0.0)
            out.append(f"subscription {s} ({ns}): {n} missing, ids {gone[0]}..{gone[-1]}, highest received "
                       f"{max(got, default=0)}, last push {time.monotonic() - last_at:.1f} s ago, "
                       f"delivered by {holders.get(s, 'nobody')}")
            for m in self.members:
                out += [f"  {m.name}: {line}" for line in m.log_lines(f"subscription {s}", f" {s}]", f"[{s},",
                                                                      f" {s},", limit=12)]
        return out

    # -- checks ----------------------------------------------------------------------------

    async def _finish(self) -> None:
        await self.publishers.stop()
        for m in self.members:
            m.resume()
        acked = self.publishers.acked
        r = self.report
        r.acked = len(acked)
        r.server_errors = sum(n for s, n in self.publishers.statuses.items() if s is not None and s >= 500 and s != 503)
        r.server_errors += self.publishers.no_retry_after

        def missing() -> int:
            lost = set()
            for s, ns in self.sub_ns.items():
                got = set(self.recorder.got[s])
                gone = {k for k in acked if k[0] == ns and k not in got}
                self.missing[s] = len(gone)
                lost |= gone
            return len(lost)

        end = time.monotonic() + 90
        while missing() and time.monotonic() < end:
            await asyncio.sleep(0.5)
        r.lost = missing()
        if r.lost:
            r.details = await self._explain(acked)
        r.overlaps = self.recorder.overlaps
        r.stale_pushes = self.recorder.stale
        r.pushes = self.recorder.pushes
        for s, ns in self.sub_ns.items():
            firsts = [i for n, i in dict.fromkeys(self.recorder.got[s]) if n == ns]
            if firsts != sorted(firsts):
                r.out_of_order += 1
        conn = await asyncpg.connect(self.primary.dsn, timeout=10)
        try:
            rows = await conn.fetch("SELECT namespace, id, data FROM events")
        finally:
            await conn.close()
        stored: dict[str, list[int]] = {}
        where: dict[str, list[tuple[str, int]]] = {}  # logical event -> where it is in the log
        for ns, i, data in rows:
            stored.setdefault(ns, []).append(i)
            text = json.loads(bytes(data)).get("Text")
            if isinstance(text, str):
                where.setdefault(text, []).append((ns, i))
        pubs = self.publishers
        r.logical, r.repeats, r.unsettled = len(pubs.ids), pubs.repeats, pubs.unsettled_at_stop()
        r.duplicates = sum(1 for places in where.values() if len(places) > 1)
        for key, (ns, got) in pubs.ids.items():
            if got and (len(set(got)) != 1 or where.get(key) != [(ns, got[0])]):
                r.wrong_ids += 1
        for ids in stored.values():
            if sorted(ids) != list(range(1, len(ids) + 1)):
                r.id_gaps += 1
        have = {(ns, i) for ns, ids in stored.items() for i in ids}
        r.lost_in_store = len(acked - have)
        r.fenced_writes = sum(m.log_count("is no longer held by") for m in self.members)
