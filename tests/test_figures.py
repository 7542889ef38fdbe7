"""Figures people read: counts exactly or clearly rounded, never in scientific notation
(the pipeline's report is held in tests/test_pipeline_stats.py; the CLI prints counts as
integers). Here: the console's chart labels, run by Node outside a browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from importlib import resources

import pytest

pytestmark = pytest.mark.skipif(shutil.which("node") is None and not os.environ.get("CI"),
                                reason="Node is not installed (apt-get install nodejs; .ci/run does)")

VALUES = [0, 0.04, 0.25, 12.34, 99.96, 100, 1500, 2000, 4321.6, 9999, 123_456_789, 1e21, 1e-7]


def _figures(values: list[float]) -> list[str]:
    charts = resources.files("tidings.console") / "static" / "charts.js"
    script = (f"import {{ figure }} from {json.dumps(str(charts))};"
              f"console.log(JSON.stringify({json.dumps(values)}.map(figure)));")
    out = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=30,
                         check=True)
    return list(json.loads(out.stdout))


def test_console_chart_labels_are_counts_or_rounded_never_scientific() -> None:
    shown = dict(zip(VALUES, _figures(VALUES), strict=True))
    assert not [s for s in shown.values() if re.search(r"e[+-]?\d", s)], shown
    assert shown[2000] == "2,000" and shown[9999] == "9,999" and shown[123_456_789] == "123,456,789"
    assert shown[4321.6] == "4,322" and shown[12.34] == "12.3" and shown[0.25] == "0.3"
    assert shown[1e21] == "1,000,000,000,000,000,000,000" and shown[1e-7] == "0"
