"""The driver JVM's class archive (tidings.pipeline._jvm_cache): written once, used after,
never half-written, and given up when the JVM cannot start with it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from tidings.pipeline import _jvm_cache
from tidings.pipeline.session import java_path

JAVA = java_path() or pytest.skip("no Java", allow_module_level=True)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TIDINGS_SPARK_CDS", raising=False)
    return tmp_path / "tidings"


def test_written_under_its_own_name_then_put_in_place_once_settled(cache: Path) -> None:
    first = _jvm_cache.driver_java_options(JAVA)
    assert first is not None and "-XX:ArchiveClassesAtExit=" in first.options and ".tmp" in first.options
    written = Path(first.options.split('ArchiveClassesAtExit="', 1)[1].split('"', 1)[0])
    written.write_bytes(b"x" * 100)  # what the JVM leaves at exit
    again = _jvm_cache.driver_java_options(JAVA)  # too fresh: it may still be being written
    assert again is not None and "ArchiveClassesAtExit" in again.options and not first.path.exists()
    old = time.time() - 3600
    os.utime(written, (old, old))
    used = _jvm_cache.driver_java_options(JAVA)
    assert used is not None and f'-XX:SharedArchiveFile="{first.path}"' in used.options
    assert first.path.read_bytes() == b"x" * 100 and not written.exists()
    used.discard()  # what build() does when the JVM will not start with it
    assert not first.path.exists()
    assert "ArchiveClassesAtExit" in (_jvm_cache.driver_java_options(JAVA) or used).options


def test_off_when_asked(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDINGS_SPARK_CDS", "0")
    assert _jvm_cache.driver_java_options(JAVA) is None
