"""``python -m bench.profile hops`` (issue 39, point 2): a live event's latency and CPU per
hop, from the stamps ``tidings/hops.py`` records only when ``TIDINGS_HOPS_DIR`` is set.
No figure is asserted: only that the command runs and prints every hop, that the joins
are right, and that without the variable nothing changes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench import hops

from tidings import hops as recorder_module
from tidings import tracing

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("stream", [False, True])
def test_the_hops_command_runs_briefly_and_prints_every_hop(stream: bool) -> None:
    cmd = [sys.executable, "-m", "bench.profile", "hops", "--rate", "100", "--seconds", "1.5", "--no-sample"]
    env = {k: v for k, v in os.environ.items() if k != recorder_module.ENV}
    out = subprocess.run(cmd + (["--stream"] if stream else []), cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    rows = {line.split(" | ")[0].lstrip("| "): line for line in out.splitlines() if line.startswith("| ")}
    for hop in (*hops.HOPS, hops.END):
        assert hop in rows, out
        if hop != "front -> broker":  # none when every connection landed on the broker itself
            assert rows[hop].split(" | ")[1].count(" / ") == 2, out  # p50 / p99 / p99.9 of all events
    assert "CPU per hop" in out and "| all |" in out


def test_the_join_cuts_each_event_at_its_stamps() -> None:
    ms = 1_000_000
    # event 7 came through a front over HTTP; event 8 to the broker itself, and was pushed
    # by a batch-mate's hand-off before its own publisher's task saw the append done.
    records = [
        ("in", "front", 7, 1 * ms, 30 * ms), ("in", "internal", 7, 4 * ms, 29 * ms),
        ("pub", 7, 5 * ms, 6 * ms, 10 * ms, 11 * ms), ("push", 1, [7, 8], 12 * ms, 20 * ms, "ack"),
        ("in", "broker", 8, 1 * ms, 30 * ms), ("pub", 8, 3 * ms, 4 * ms, 13 * ms, 14 * ms),
    ]
    handled = [(7, 0, 2 * ms, 13 * ms, 15 * ms), (8, 0, 2 * ms, 13 * ms, 15 * ms)]
    got = hops._join(handled, records)
    front, broker = got["front"], got["broker"]
    assert [front[h][0] for h in hops.HOPS] == [1.0, 1.0, 2.0, 2.0, 4.0, 2.0, 1.0, 2.0]
    assert front[hops.END] == [15.0] and front[hops.ANSWERED] == [5.0]
    assert "front -> broker" not in broker
    assert broker["commit"] == [8.0] and broker["route"] == [0.0]  # the push came first: no negative hop


def test_without_the_variable_the_server_has_no_recorder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(recorder_module.ENV, raising=False)
    assert tracing.start("auto", {}) is None
    app = object()
    assert recorder_module.asgi(app, "front") is app
    # Nothing of it is even imported by the server and the fronts.
    code = ("import sys, tidings.server, tidings.front.process, tidings.broker; "
            "print('tidings.hops' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != recorder_module.ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_push_under_the_recorder_carries_the_headers_it_carries_without_it(tmp_path: Path) -> None:
    rec = recorder_module.Recorder(str(tmp_path))
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    traced = b'[["traceparent",{"Text":"%s"}]]' % parent.encode()
    assert rec.push(1, [1, 2], ["a", "a"], [b"[]", traced]).headers == {"traceparent": parent}
    assert rec.push(1, [1], ["a"], [b"[]"]).headers == {}
    spans = rec.receive([])
    spans.commit([0])
    spans.committed([0], [41])
    spans.route([0])
    spans.end(None)
    rec.flush()
    assert [r[:2] for r in hops.msgspec.msgpack.decode(next(tmp_path.glob("hops-*.msgpack")).read_bytes())] == [
        ["pub", 41]]


def test_the_recorder_keeps_at_most_its_bound_and_counts_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server left with the variable set keeps bounded memory between flushes."""
    monkeypatch.setattr(recorder_module, "MAX_RECORDS", 3)
    rec = recorder_module.Recorder(str(tmp_path))
    for i in range(5):
        rec.push(1, [i], ["a"], [b"[]"]).end("ok", "")
    assert len(rec.records) == 3 and rec.dropped == 2
    rec.flush()
    got = hops.msgspec.msgpack.decode(next(tmp_path.glob("hops-*.msgpack")).read_bytes())
    assert [r[0] for r in got] == ["push", "push", "push", "dropped"] and got[-1] == ["dropped", 2]
    assert rec.records == [] and rec.dropped == 0


def test_every_rule_names_code_that_exists() -> None:
    """The CPU split maps py-spy's frames to hops by module: a module renamed or moved out
    of its package would silently fall to "other"."""
    src = ROOT / "src"
    for part, _func, _hop in hops.RULES:
        if part.startswith("tidings/"):
            assert (src / part).exists(), part
    frame = "Push.post (tidings/broker/delivery/_push.py:97)"
    assert hops.classify([frame], hops.RULES, "none") == "push"
