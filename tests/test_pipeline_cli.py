"""``tidings pipeline`` as another command's subparser: arguments, durations, ``expire``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tests.test_pipeline_source import make_store
from tidings.pipeline.cli import add_pipeline_parser, parse_duration, run_pipeline


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tidings")
    add_pipeline_parser(p.add_subparsers(dest="command", required=True))
    return p


def test_arguments_parse_inside_a_parent_parser(tmp_path: Path) -> None:
    args = parser().parse_args(
        ["pipeline", "archive", "--data-dir", str(tmp_path), "--older-than", "12h", "--namespace", "a",
         "--namespace", "b:c", "--no-trim", "--workers", "3"]
    )
    assert (args.command, args.pipeline_action) == ("pipeline", "archive")
    assert (args.older_than, args.namespace, args.no_trim, args.workers) == (43_200, ["a", "b:c"], True, 3)
    assert parser().parse_args(["pipeline", "archive"]).older_than == 7 * 86_400
    durations = [parse_duration(t) for t in ("90", "90s", "15m", "2d", "1w", "0.5h")]
    assert durations == [90, 90, 900, 172_800, 604_800, 1800]
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration("soon")


def test_expire_runs_without_spark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_store(tmp_path / "var", {"a": 1})
    args = parser().parse_args(["pipeline", "expire", "--data-dir", str(tmp_path / "var")])
    assert run_pipeline(args) == 0
    assert json.loads(capsys.readouterr().out) == {"expired": [], "deliveries_trimmed": 0}
    args = parser().parse_args(["pipeline", "expire", "--data-dir", str(tmp_path / "nowhere")])
    assert run_pipeline(args) == 2
    assert "no event store" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()  # nothing made where there is no store


def test_help_lists_every_pipeline_command_and_errors_lead_with_their_code(tmp_path: Path) -> None:
    import subprocess
    import sys

    top = subprocess.run([sys.executable, "-m", "tidings", "pipeline", "--help"], capture_output=True, text=True)
    assert top.returncode == 0
    for action in ("archive", "expire", "compact", "vacuum", "stats"):
        assert action in top.stdout
    proc = subprocess.run([sys.executable, "-m", "tidings", "pipeline", "archive", "--data-dir", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert line.startswith("store_not_found: ") and line.endswith("give --data-dir the folder holding the server's "
                                                                 "tidings.db")


def test_numbers_are_formatted_for_people() -> None:
    from tidings.pipeline._human import fmt_bytes, fmt_count, fmt_rate, fmt_seconds

    assert fmt_count(4330) == "4,330" and fmt_count(1_000_000) == "1,000,000"
    assert fmt_rate(312_456.7) == "312,000 events/s" and fmt_rate(4.33e3) == "4,330 events/s"
    assert fmt_rate(2.5, "rows") == "2.5 rows/s"
    assert [fmt_bytes(b) for b in (512, 1536, 3 * 2**30, 5 * 2**40)] == ["512 B", "1.5 KiB", "3.0 GiB", "5,120.0 GiB"]
    assert [fmt_seconds(s) for s in (0.42, 12.34, 125, 7300)] == ["0.42 s", "12.3 s", "2 min 5 s", "2 h 1 min"]


def test_tidings_archive_is_the_archive_job_and_its_maintenance(tmp_path: Path) -> None:
    """``tidings archive`` (the name the issue and docs/pipeline.md use) parses as
    ``tidings pipeline archive``; ``tidings archive compact|expire|vacuum`` as the others,
    with the folder given before or after the action."""
    from tidings.pipeline.cli import add_archive_parser

    p = argparse.ArgumentParser(prog="tidings")
    add_archive_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["archive", "--data-dir", str(tmp_path), "--older-than", "1h", "--no-trim"])
    assert (args.archive_action, args.data_dir, args.older_than, args.no_trim) == (None, tmp_path, 3600, True)
    for where in (["--data-dir", str(tmp_path), "compact"], ["compact", "--data-dir", str(tmp_path)]):
        args = p.parse_args(["archive", *where, "--min-files", "3"] if where[0] == "compact" else ["archive", *where])
        assert args.archive_action == "compact" and args.data_dir == tmp_path, where
    assert p.parse_args(["archive", "expire"]).archive_action == "expire"


def test_tidings_archive_runs_from_the_command_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    make_store(tmp_path / "var", {"a": 1})
    run = [sys.executable, "-m", "tidings", "archive"]
    proc = subprocess.run([*run, "expire", "--data-dir", str(tmp_path / "var")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"expired": [], "deliveries_trimmed": 0}
    proc = subprocess.run([*run, "--data-dir", str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("store_not_found: ")
