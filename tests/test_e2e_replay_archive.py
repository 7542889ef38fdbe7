"""A replay across the archive seam: archived ids through Spark (filter pushed down), the
rest from the hot log, every event of the range once, in order.

The test process archives with the shared ``spark`` session; the server starts its own
session on the first archived replay (docs/replay.md).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest

from tidings.pipeline._backend import hot_log
from tidings.pipeline._hotlog import IdRange
from tidings.pipeline.layout import Manifest

from .conftest import ServerProcess
from .test_e2e_replay import NS, Recorder, api, done, register, setup

pytest.importorskip("pyspark")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers must import tidings
pytestmark = pytest.mark.e2e


async def test_replay_spans_archive_and_hot_log_without_gap_or_duplicate(
    spark: Any, server: ServerProcess, endpoints: Any
) -> None:
    from tidings.pipeline.archive import archive
    from tidings.pipeline.session import prepare

    rec = Recorder()
    ep = await endpoints(rec)
    await setup(server, ep.url, 150)
    cut = time.time_ns()
    more = [{"namespace": NS, "data": {"Map": [["n", {"Nat": i}]]}} for i in range(151, 301)]
    await api(server, "icrc72_publish", more)

    prepare(spark)
    root = server.data_dir / "archive"
    # The server's log: its SQLite file, or its PostgreSQL store (TIDINGS_TEST_STORE=postgresql).
    log = server.env.get("TIDINGS_STORE") or server.data_dir
    run = archive(data_dir=log, archive_dir=root, older_than_s=0, now_ns=cut)
    assert Manifest.load(root).hwm(NS) == 150 == run.namespaces[0].to_id
    with hot_log(log).connect() as c:
        bounds = c.id_bounds(NS)
        hot_ids = [r[2] for rows in c.read_range(IdRange(NS, *bounds)) for r in rows] if bounds else []
    assert hot_ids == list(range(151, 301))  # ids up to the mark are only in the archive now

    rid = (await register(server, 100, 201, [["icrc72:subscription:filter", {"Text": "n != 120"}]]))["Ok"]
    s = await done(server, rid, timeout=180)
    assert s["status"] == {"completed": 100}, s
    got = rec.replayed(rid)
    want = [i for i in range(100, 201) if i != 120]
    assert [n["eventId"] for n in got] == want
    assert [n["data"] for n in got] == [{"Map": [["n", {"Nat": i}]]} for i in want]
    assert [n["prev_id"] for n in got] == [i - 1 for i in want]
    assert s["stats"]["icrc77:replay:stats:skipped"] == 1
