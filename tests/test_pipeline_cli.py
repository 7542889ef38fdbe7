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
