"""Spark Connect: the statistics job through a Connect server started from the installed
PySpark (its bundled ``spark-connect`` jar; nothing is downloaded), and the one-line
error when the ``connect`` extra is missing. The archive job needs no Spark at all."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_pipeline_source import make_store

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("grpc")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = Path(pyspark.__file__).parent
    port = _free_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
             "--master", "local[2]", "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "spark-internal"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the Spark Connect server exited: {log.read_text()[-3000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"the Spark Connect server did not listen within 240 s: {log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cli(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = f"import sys; {prelude}from tidings.pipeline.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)


def test_archive_then_stats_through_spark_connect(tmp_path: Path, connect_url: str) -> None:
    data, root = tmp_path / "var", tmp_path / "archive"
    make_store(data, {"shop.orders": 40, "x:y": 10})
    archived = _cli("archive", "--data-dir", str(data), "--archive-dir", str(root), "--older-than", "0", "--quiet")
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout)["events"] == 50
    out = tmp_path / "report.html"
    proc = _cli("stats", "--data-dir", str(data), "--archive-dir", str(root), "--master", connect_url,
                "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["totals"]["events"] == 50 and out.exists()


def test_connect_without_the_extra_is_one_line(tmp_path: Path) -> None:
    make_store(tmp_path / "var", {"a": 1})
    proc = _cli("stats", "--data-dir", str(tmp_path / "var"), "--master", "sc://127.0.0.1:1",
                prelude="sys.modules['grpc'] = None; ")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("connect_missing: ") and "pip install 'tidings[connect]'" in lines[-1]
    assert "Traceback" not in proc.stderr
