"""The cluster under every kind of fault, with the fault-injection run ``python -m
bench.chaos`` uses (docs/scaling.md, "Failure model"): three broadcasters on a throwaway
primary PostgreSQL with a synchronous standby, publishers and subscribers running, and
one fault of each kind, a pause aimed at the moment a member's session holds a lock
included. The publishers give each event an idempotency key and send it again, through
another member, until answered. Afterwards nothing answered Ok is missing from any
subscription or from the database, every logical event is in the log exactly once and
where its answer said, ids are gap-free, first deliveries are in order, no subscription was pushed by
two members at once or under a lease epoch older than one it had seen, no publish got a
5xx other than 503 with Retry-After, and each fault's unavailability is within its bound."""

from __future__ import annotations

import shutil

import pytest
from bench.chaos import Chaos, Fault

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("runuser") is None, reason="needs runuser to run PostgreSQL as its user"),
]


async def test_every_kind_of_fault_keeps_the_cluster_s_promises() -> None:
    schedule = [
        Fault("pause", 6.0, 0), Fault("kill", 3.0, 1), Fault("db-partition", 3.0, 2), Fault("peer-partition", 3.0, 0),
        Fault("db-restart-fast", 3.0), Fault("db-restart-immediate", 3.0), Fault("db-failover", 3.0),
    ]
    async with Chaos(3) as chaos:
        report = await chaos.run(schedule, between_s=1.5)
    print("\n".join(report.lines()))
    assert [f.kind for f in report.faults] == [f.kind for f in schedule]
    assert report.acked > 500
    assert report.lost == 0 and report.lost_in_store == 0, report.lines()
    assert report.id_gaps == 0 and report.out_of_order == 0, report.lines()
    assert report.duplicates == 0 and report.wrong_ids == 0, report.lines()
    assert report.logical > 500 and report.unsettled <= 6, report.lines()  # at most one per publisher in flight
    assert report.overlaps == 0 and report.stale_pushes == 0, report.lines()
    assert report.server_errors == 0, report.lines()
    assert all(f.ok for f in report.faults), report.lines()
