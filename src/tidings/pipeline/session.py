"""Building the SparkSession the pipeline jobs run in: local by default, a cluster on request.

* no master: ``local[*]``, in this process, which needs Java (17 or 21);
* ``--master spark://host:7077`` (or ``yarn``, ``k8s://...``): the same jobs on a cluster,
  whose executors must reach the data dir and the archive at the same paths;
* a Spark Connect URL (``sc://host:15002``): a remote session, no local Java needed.

Every session gets what the pipeline relies on: UTC session time, filter pushdown into
Python data sources, and the ``tidings`` source registered.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ..core.addresses import CONNECT_TIMEOUT_ENV, connect_timeout_s, redact_address, unreachable
from .errors import PipelineError

__all__ = ["build", "java_available", "reach_master", "shown_master"]

JAVA_HINT = (
    "Spark needs Java 17 or 21 to run locally and none was found (no `java` on PATH and no JAVA_HOME). "
    "Install a JDK, e.g. `apt-get install openjdk-17-jre-headless` or Temurin 17 from adoptium.net, "
    "or run on a cluster with --master spark://HOST:7077 or a Spark Connect URL sc://HOST:15002."
)


def java_path() -> str | None:
    """The ``java`` a local session starts: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def java_available() -> bool:
    return java_path() is not None


def build(master: str | None = None, *, app_name: str = "tidings-pipeline", conf: dict[str, str] | None = None) -> Any:
    """A SparkSession for ``master`` (None: ``local[*]``; ``sc://...``: Spark Connect), ready for tidings.

    Raises :class:`PipelineError` (``java_missing``) instead of Spark's gateway error when
    a local session cannot start for want of Java, and (``spark_missing``) when PySpark
    is not installed.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise PipelineError(
            f"the Spark pipeline needs PySpark ({e}): pip install 'tidings[spark]' (PySpark 4.1+, pyarrow)",
            code="spark_missing",
        ) from None

    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        # No web UI unless asked for (TIDINGS_SPARK_UI=true, or conf): it listens on every
        # interface, without authentication, and takes time to start.
        "spark.ui.enabled": "true" if os.environ.get("TIDINGS_SPARK_UI", "").lower() == "true" else "false",
        **(conf or {}),
    }
    remote = master is not None and master.startswith("sc://")
    if remote:
        _require_connect(master)  # type: ignore[arg-type]
        wait = _connect_timeout()
        _reach(master, wait)  # type: ignore[arg-type]
        # A server that takes the connection and never answers gRPC would hold the
        # client's retries for ten minutes: the session's start has a deadline too, three
        # connect timeouts (a real server's first session takes seconds on a busy host).
        spark = _within(wait, master, lambda: _start(  # type: ignore[arg-type]
            SparkSession, app_name, master, True, settings, None))
        prepare(spark)
        return spark
    else:
        if master is not None and master.startswith("spark://"):
            # The standalone client retries a silent master for a minute before it gives up.
            reach_master(master, _connect_timeout())
        if not java_available():
            raise PipelineError(JAVA_HINT, code="java_missing")
        # Python workers (the data source's planner among them, which reads only the
        # environment) must import tidings: run them with this interpreter.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings.setdefault("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        if (master or "local").startswith("local"):
            # Workers forked with PySpark and the source loaded (tidings.pipeline._daemon).
            settings.setdefault("spark.python.daemon.module", "tidings.pipeline._daemon")
    archive = None
    if not remote and "spark.driver.extraJavaOptions" not in settings:
        from ._jvm_cache import driver_java_options

        java = java_path()
        archive = driver_java_options(java) if java else None  # the JVM's classes mapped from an archive
    spark = _start(SparkSession, app_name, master if remote else master or "local[*]", remote, settings, archive)
    prepare(spark)
    return spark


def _start(session: Any, app_name: str, master: str | None, remote: bool, settings: dict[str, str],
           archive: Any) -> Any:
    """``getOrCreate`` with the class archive's options; once more without them, and
    without the archive, if the JVM does not start with them (a damaged archive)."""
    builder: Any = session.builder.appName(app_name)
    builder = builder.remote(master) if remote else builder.master(master)
    for k, v in settings.items():
        builder = builder.config(k, v)
    if archive is None:
        return builder.getOrCreate()
    try:
        return builder.config("spark.driver.extraJavaOptions", archive.options).getOrCreate()
    except Exception:
        archive.discard()
        return builder.config("spark.driver.extraJavaOptions", "").getOrCreate()


def shown_master(master: str) -> str:
    """``master`` fit to print: a Spark Connect URL's ``;token=`` (and any password) as ``***``."""
    head, _, params = master.partition(";")
    if not params:
        return redact_address(master)
    kept = [p if p.split("=", 1)[0].lower() not in ("token", "password") else p.split("=", 1)[0] + "=***"
            for p in params.split(";")]
    return ";".join([redact_address(head), *kept])


def _connect_timeout() -> float:
    try:
        return connect_timeout_s(os.environ)
    except ValueError as e:
        raise PipelineError(str(e), code="invalid_option", hint=f"set {CONNECT_TIMEOUT_ENV} to seconds") from None


def _connect_address(master: str) -> tuple[str, int]:
    """Host and port of a Spark Connect URL (``sc://host[:port][/;param=value...]``)."""
    try:
        parts = urlsplit(master)
        host, port = parts.hostname, parts.port or 15002
    except ValueError as e:
        raise PipelineError(f"--master {master.split(';')[0]!r} is not a Spark Connect URL: {e}",
                            code="invalid_option") from None
    if not host:
        raise PipelineError(f"--master {master.split(';')[0]!r} names no host", code="invalid_option")
    return host, port


def _reach(master: str, wait: float) -> None:
    """Fail at once, naming the address and the setting, when nothing takes a TCP
    connection there: Spark Connect's client would retry for ten minutes."""
    host, port = _connect_address(master)
    try:
        socket.create_connection((host, port), timeout=wait).close()
    except OSError as e:
        reason = "no answer in time" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise PipelineError(unreachable("Spark Connect", f"sc://{host}:{port}", wait, reason),
                            code="connect_unreachable",
                            hint="check --master and that the Spark Connect server runs") from None


def reach_master(master: str, wait: float) -> None:
    """Fail within ``wait`` seconds, naming the master and what to do, when no master of a
    standalone URL (``spark://h1:7077[,h2:7077]``), or the Spark Connect server of an
    ``sc://`` URL, takes a TCP connection. Other masters (``local``, ``yarn``...) pass."""
    if master.startswith("sc://"):
        _reach(master, wait)
        return
    if not master.startswith("spark://"):
        return
    reasons = []
    for hostport in master.removeprefix("spark://").split(","):
        host, _, port = hostport.rstrip("/").rpartition(":")
        try:
            socket.create_connection((host or hostport, int(port or 7077)), timeout=wait).close()
            return
        except ValueError:
            raise PipelineError(f"--master {master!r} is not spark://HOST:PORT[,HOST:PORT]",
                                code="invalid_option") from None
        except OSError as e:
            reasons.append("no answer in time" if isinstance(e, TimeoutError) else (e.strerror or str(e)))
    raise PipelineError(unreachable("the Spark master", redact_address(master), wait, "; ".join(reasons)),
                        code="master_unreachable",
                        hint="check --master and that the master runs (sbin/start-master.sh, port 7077)")


SESSION_WAITS = 3
"""A Spark Connect session must start within this many connect timeouts."""


def _within(wait: float, master: str, start: Callable[[], Any]) -> Any:
    """``start()`` in a daemon thread, given ``SESSION_WAITS * wait`` seconds; a thread
    stuck in gRPC's retries is left behind (it does not hold the process at exit)."""
    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(start())
        except BaseException as e:  # handed to the caller
            failed.append(e)

    t = threading.Thread(target=run, name="tidings-spark-connect", daemon=True)
    t.start()
    t.join(SESSION_WAITS * wait)
    if failed:
        raise failed[0]
    if not done:
        _abandon_connect()
        host, port = _connect_address(master)
        raise PipelineError(unreachable("Spark Connect", f"sc://{host}:{port}", wait,
                                        f"it took the connection but started no session within "
                                        f"{SESSION_WAITS * wait:g} s"),
                            code="connect_unreachable",
                            hint="check that the address is a Spark Connect server's (default port 15002)")
    return done[0]


def _abandon_connect() -> None:
    """Close the half-made Connect session's channel: it ends the RPC still retrying,
    and the client's exit hook, which would otherwise send one more RPC to the silent
    server and hold the process at exit, skips a closed client."""
    import contextlib

    from pyspark.sql.connect.session import SparkSession as RemoteSession

    session = RemoteSession._default_session
    if session is not None:
        with contextlib.suppress(Exception):
            session.client.close()


def _require_connect(master: str) -> None:
    """:class:`PipelineError` ``connect_missing`` (one line, naming the extra) without the Connect client."""
    missing = [m for m in ("grpc", "grpc_status", "google.rpc", "pandas", "zstandard") if not _importable(m)]
    if missing:
        raise PipelineError(
            f"--master {master} is Spark Connect, whose client needs {', '.join(missing)} (not installed); "
            "pip install 'tidings[connect]'",
            code="connect_missing",
        )


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        return False


def prepare(spark: Any) -> None:
    """Settings and registration the pipeline needs, on a session made elsewhere (tests, notebooks)."""
    from .source import register

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    register(spark)
