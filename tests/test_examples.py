"""Every program in examples/ runs against a real server, so that none rots; and the SDK's
types reach a user's type checker (the package ships py.typed)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import ServerProcess, free_port

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers must import tidings


def env_for(server: ServerProcess) -> dict[str, str]:
    return {**os.environ, "TIDINGS_URL": server.url, "TIDINGS_TOKEN": server.admin_token}


def run(name: str, server: ServerProcess, *args: str) -> list[str]:
    p = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=120,
                       env=env_for(server))
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def started(name: str, server: ServerProcess, *args: str, ready: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, str(EXAMPLES / name), *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env_for(server))
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.startswith(ready), (line, p.stderr.read() if p.stderr else "")
    return p


def test_every_example_is_tested() -> None:
    tested = {"publisher.py", "subscriber_app.py", "stream_subscriber.py", "replay.py", "cloudevents_in_out.py",
              "spark_read.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_publisher(server: ServerProcess) -> None:
    assert run("publisher.py", server) == ["1", "2", "3", "4"]


@pytest.mark.parametrize("name, args, ready", [
    ("subscriber_app.py", lambda: [str(free_port()), "4"], "subscribed"),
    ("stream_subscriber.py", lambda: ["4"], "listening to"),
])
def test_subscribers_see_what_the_publisher_publishes(server: ServerProcess, name: str, args: Any,
                                                      ready: str) -> None:
    run("publisher.py", server)  # registers the publication
    sub = started(name, server, *args(), ready=ready)
    run("publisher.py", server)
    out, err = sub.communicate(timeout=60)
    assert sub.returncode == 0, err
    assert [line.split(":")[0] for line in out.splitlines()] == [f"com.example.orders #{i}" for i in range(5, 9)]
    assert "{'order': 4, 'total': 38}" in out


def test_replay(server: ServerProcess) -> None:
    run("publisher.py", server)
    out = run("replay.py", server, "2")
    assert [x.split(":")[0] for x in out[:-1]] == ["replayed #2", "replayed #3", "replayed #4"]
    assert out[-1].endswith("completed, 3 sent")


def test_cloudevents_in_and_out(server: ServerProcess) -> None:
    out = run("cloudevents_in_out.py", server, str(free_port()))
    assert out[0].startswith("published: 200")
    assert out[1] == "pushed back: com.example.order.created order-1 from /shop: {'order': 1, 'total': 17}"


def test_spark_read(server: ServerProcess, spark: Any) -> None:
    run("publisher.py", server)
    spec = importlib.util.spec_from_file_location("spark_read_example", EXAMPLES / "spark_read.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(spark, str(server.data_dir))
    assert [(r.id, r.total) for r in rows] == [(1, 9.5), (2, 19.0), (3, 28.5), (4, 38.0)]


def test_a_users_type_checker_sees_the_sdk_types(tmp_path: Path) -> None:
    """mypy on a user's file, outside the source tree, against the installed package: with
    py.typed the SDK's annotations are used (a wrong type is an error); without it, the
    import would be an untyped module and the call unchecked."""
    import tidings

    installed = Path(tidings.__file__).parent
    assert (installed / "py.typed").is_file()
    user = tmp_path / "user.py"
    user.write_text(
        "from tidings.client import Publisher\n"
        "async def go() -> None:\n"
        "    async with Publisher('http://127.0.0.1:8072', 'token') as pub:\n"
        "        event_id: str = await pub.publish('com.example.orders', {'total': 17})\n"
        "        reveal_type(pub.publish)\n"
    )
    p = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--strict", str(user)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert 'Incompatible types in assignment (expression has type "int", variable has type "str")' in p.stdout, p.stdout
    assert "def (namespace: str, data: Any" in p.stdout, p.stdout
    assert "missing library stubs or py.typed marker" not in p.stdout


def test_py_typed_is_package_data() -> None:
    """Installed from a wheel too, not only in an editable install."""
    import tomllib

    conf = tomllib.loads((EXAMPLES.parent / "pyproject.toml").read_text())
    assert "py.typed" in conf["tool"]["setuptools"]["package-data"]["tidings"]
