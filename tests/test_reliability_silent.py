"""The `silent` group of benchmarks/reliability.py in CI: every case
handled (rank sets, clocks, run listing, tracebacks other than rich markup, the smaller faults):
nothing accepted in silence, no traceback, nothing lost or left behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

COUNTS = ("cases tried", "handled (one-line error / recovered)", "lost data", "tracebacks", "accepted in silence",
          "blocked", "left behind", "other")


@pytest.mark.slow     # real multi-rank jobs (the developer tier leaves them to the full suite)
def test_every_silent_case_is_handled(repo: Path, fixtures_dir: Path) -> None:
    result = subprocess.run([sys.executable, str(repo / "benchmarks" / "reliability.py"), "--group", "silent",
                             "--jobs", "4", "--fixtures", str(fixtures_dir)], capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr
    counts = {name: int(value) for name, value in re.findall(r"^([a-z][^:\n]*): (\d+)$", result.stdout, re.M)}
    assert set(COUNTS) <= set(counts), result.stdout
    assert counts["cases tried"] >= 50, result.stdout
    assert counts["handled (one-line error / recovered)"] == counts["cases tried"], result.stdout
    assert all(counts[name] == 0 for name in COUNTS[2:]), result.stdout
