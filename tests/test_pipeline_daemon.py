"""The Python daemon local sessions fork their workers from (tidings.pipeline._daemon)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from tidings.pipeline import _daemon  # noqa: E402 - after the skip


def spark_zips() -> list[str]:
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    return [str(p) for p in sorted(lib.glob("*.zip"))]


def test_the_installed_pyspark_goes_before_its_uncacheable_zip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark puts pyspark.zip first on a worker's path; the same version, installed, is
    found first after the daemon's reordering, so its compiled caches are used."""
    zips = spark_zips()
    assert any(z.endswith("pyspark.zip") for z in zips)
    monkeypatch.setattr(sys, "path", [*zips, *sys.path])
    _daemon._prefer_installed_pyspark()
    assert sys.path[-len(zips):] == zips and not set(zips) & set(sys.path[: -len(zips)])


def test_a_different_pyspark_keeps_the_zip_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed PySpark of another version than the JVM's zip must not be used."""
    other = tmp_path / "pyspark"
    other.mkdir()
    (other / "version.py").write_text('__version__ = "0.0.1"\n')
    zips = spark_zips()
    path = [*zips, str(tmp_path), *[p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "pyspark"))]]
    monkeypatch.setattr(sys, "path", list(path))
    _daemon._prefer_installed_pyspark()
    assert sys.path == path
