"""The archive job against a live server that keeps publishing: no event lost, the chain goes on."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServerProcess
from tests.test_pipeline_archive import archived, hot
from tidings.client import SyncPublisher

pytest.importorskip("pyspark")

pytestmark = pytest.mark.e2e

NS = "live.orders"


def test_archive_while_the_server_publishes(spark: Any, server: ServerProcess, tmp_path: Path) -> None:
    from tidings.pipeline.archive import archive
    from tidings.pipeline.history import events
    from tidings.pipeline.session import prepare

    prepare(spark)
    root = tmp_path / "archive"
    pub = SyncPublisher(server.url, server.admin_token)
    published: list[int] = []
    stop = threading.Event()
    failed: list[BaseException] = []
    try:
        pub.register_publication(NS)
        for k in range(6):
            published += pub.publish_many(NS, [{"n": k * 50 + i} for i in range(50)])

        def keep_publishing() -> None:
            p = SyncPublisher(server.url, server.admin_token)
            try:
                while not stop.is_set():
                    published.extend(p.publish_many(NS, [{"n": -1}] * 20))
            except BaseException as e:
                failed.append(e)
            finally:
                p.close()

        t = threading.Thread(target=keep_publishing)
        t.start()
        try:
            run = archive(data_dir=server.data_dir, archive_dir=root, older_than_s=0, chunk_size=100)
        finally:
            stop.set()
            t.join(30)
        assert not failed
        assert run.namespaces[0].to_id >= 300
        # The chain goes on after the trim: the next id follows the last one published.
        (last,) = pub.publish_many(NS, [{"n": "after"}])
        assert last == max(published) + 1
        published.append(last)
    finally:
        pub.close()
    assert sorted(published) == list(range(1, len(published) + 1))
    data = server.data_dir
    ids = sorted(i for ns, i, _, _ in archived(root) + hot(data, root) if ns == NS)
    assert ids == sorted(published)
    assert sorted(r.id for r in events(spark, NS, data_dir=data, archive_dir=root).select("id").collect()) == ids
