"""The archive's reader without Spark (``tidings.pipeline.archive_read``): a window of ids
from files chosen by name and row groups chosen by their statistics, against a plain
filter over every row; and what reading it costs a replay process in imports."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.pipeline import layout
from tidings.pipeline._arrow import FILE_SCHEMA, archive_table
from tidings.pipeline.archive_read import EVENT_COLUMNS, read_archived

NS = "a.b"


def _events(ids: list[int]) -> pa.Table:
    n = len(ids)
    return pa.table({
        "seq": pa.array([i * 10 for i in ids], pa.int64()),
        "id": pa.array(ids, pa.int64()),
        "prev_id": pa.array([None if i == 1 else i - 1 for i in ids], pa.int64()),
        "timestamp": pa.array([1_700_000_000_000_000_000 + i for i in ids], pa.int64()),
        "source": pa.array(["p"] * n, pa.string()),
        "headers": pa.array(["[]"] * n, pa.string()),
        "data": pa.array([f'{{"Nat":{i}}}' for i in ids], pa.string()),
    })


def _archive(root: Path, runs: list[tuple[int, int]], group: int, hwm: int) -> None:
    """One file per run of ids ``lo..hi``, in row groups of ``group`` rows, in two date folders."""
    for k, (lo, hi) in enumerate(runs):
        table, _ = archive_table(_events(list(range(lo, hi + 1))))
        d = layout.namespace_dir(root, NS) / f"date=2026-11-{10 + k % 2:02d}"
        d.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, d / layout.file_name(lo, hi, 0), row_group_size=group)
    layout.Manifest(namespaces={NS: layout.NamespaceState(hwm=hwm)}).save(root)


def _expected(root: Path, lo: int, hi: int, hwm: int) -> list[dict[str, object]]:
    rows = []
    for f in sorted(root.rglob("*.parquet")):
        rows += pq.read_table(f, columns=list(EVENT_COLUMNS)).to_pylist()
    return sorted((r for r in rows if lo <= r["id"] <= min(hi, hwm)), key=lambda r: r["id"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cuts=st.lists(st.integers(1, 299), max_size=4, unique=True),
    group=st.integers(1, 120),
    hwm=st.integers(0, 320),
    lo=st.integers(-5, 320),
    width=st.integers(0, 330),
)
def test_a_window_reads_exactly_the_archived_ids_in_it_in_order(
    tmp_path_factory: pytest.TempPathFactory, cuts: list[int], group: int, hwm: int, lo: int, width: int
) -> None:
    root = tmp_path_factory.mktemp("archive")
    bounds = [0, *sorted(cuts), 300]
    _archive(root, [(a + 1, b) for a, b in itertools.pairwise(bounds)], group, hwm)
    hi = lo + width
    got = read_archived(root, NS, lo, hi)
    assert got.schema == pa.schema([FILE_SCHEMA.field(c) for c in EVENT_COLUMNS])
    assert got.to_pylist() == _expected(root, lo, hi, hwm)


def test_row_groups_outside_the_window_are_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _archive(tmp_path, [(1, 1000)], 100, 1000)
    asked: list[list[int]] = []
    read = pq.ParquetFile.read_row_groups

    def spy(self: pq.ParquetFile, groups: list[int], **kw: object) -> pa.Table:
        asked.append(list(groups))
        return read(self, groups, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    assert read_archived(tmp_path, NS, 250, 420).column("id").to_pylist() == list(range(250, 421))
    assert asked == [[2, 3, 4]]


def test_a_missing_namespace_or_an_empty_window_reads_nothing(tmp_path: Path) -> None:
    _archive(tmp_path, [(1, 50)], 10, 50)
    assert read_archived(tmp_path, "other", 1, 50).num_rows == 0
    assert read_archived(tmp_path, NS, 30, 20).num_rows == 0
    assert read_archived(tmp_path / "none", NS, 1, 50).num_rows == 0


def test_reading_the_archive_does_not_import_pandas(tmp_path: Path) -> None:
    """The replay process reads the archive on its first step: pandas would add 0.15-0.2 s
    to that step. It came with ``pyarrow.dataset``, and with any Python value turned into
    an Arrow one (a mask's bounds)."""
    _archive(tmp_path / "archive", [(1, 100), (101, 300)], 30, 250)
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tidings.broker.replay._source import ReplaySource\n"
        "from tidings.settings import Settings\n"
        f"src = ReplaySource(None, Settings(data_dir=Path({str(tmp_path)!r})))\n"
        f"events = src._read_archive({NS!r}, 90, 280, b'')\n"
        "print(len(events), events[0].id, events[-1].id, 'pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["161", "90", "250", "False"]


async def test_a_replay_reads_a_small_window_first_then_larger_ones_ahead(tmp_path: Path) -> None:
    """The first batch leaves after a read as small as a hot one; the windows after it,
    ten times larger, are read while a batch is out."""
    from tidings.broker.replay._source import ReadAhead, ReplaySource
    from tidings.settings import Settings

    _archive(tmp_path / "archive", [(1, 300)], 50, 300)
    source = ReplaySource(None, Settings(data_dir=tmp_path, replay_read_size=10))  # type: ignore[arg-type]
    ahead = ReadAhead(source, NS, 301, b"")
    events, upto = await ahead.read(0, None)
    assert ([e.id for e in events], upto) == (list(range(1, 11)), 10)
    ahead.start(upto, None)
    events, upto = await ahead.read(10, None)
    assert ([e.id for e in events], upto) == (list(range(11, 111)), 110)
    events, upto = await source.read(NS, 110, 301, None)
    assert (len(events), upto) == (100, 210)
