"""The Python daemon a local Spark forks its Python workers from, ready before it forks.

Spark starts a daemon per kind of Python worker (the ``tidings`` source's lookup,
creation, read planning, reading) and forks a worker from it for each task. Left to
itself each daemon and each worker imports PySpark from ``pyspark.zip``, which Python
cannot keep compiled, so every one of them compiles PySpark's sources anew: seconds of
CPU before a query's first row on this machine
(docs/benchmarks/history/2026-11-25-pipeline-3-native-encoder.md). This daemon
puts the installed PySpark first when it is the same version as the zip, imports the
worker's module and the ``tidings`` source once, and then runs PySpark's own daemon, so
each forked worker starts with all of it loaded. :func:`tidings.pipeline.session.build`
sets ``spark.python.daemon.module`` to this module for local sessions.
"""

from __future__ import annotations

import importlib
import os
import sys
import zipfile


def _prefer_installed_pyspark() -> None:
    """Move PySpark's zips behind the installed package when both hold the same version."""
    zips = [p for p in sys.path if p.endswith(".zip") and os.path.basename(p).startswith(("pyspark", "py4j"))]
    spark_zip = next((p for p in zips if os.path.basename(p) == "pyspark.zip"), None)
    if spark_zip is None:
        return
    try:
        with zipfile.ZipFile(spark_zip) as z:
            zipped = z.read("pyspark/version.py")
    except (OSError, KeyError, zipfile.BadZipFile):
        return
    for entry in sys.path:
        if entry in zips:
            continue
        installed = os.path.join(entry or ".", "pyspark", "version.py")
        try:
            with open(installed, "rb") as f:
                same = f.read() == zipped
        except OSError:
            continue
        if same:
            sys.path[:] = [p for p in sys.path if p not in zips] + zips
        return


if __name__ == "__main__":
    _prefer_installed_pyspark()
    from pyspark import daemon

    if len(sys.argv) > 1 and sys.argv[1].startswith("pyspark"):
        importlib.import_module(sys.argv[1])  # what each forked worker imports first
    importlib.import_module("tidings.pipeline.source")
    daemon.manager()
