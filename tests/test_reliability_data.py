"""The `data` group of benchmarks/reliability.py in CI: forged forensics records and steps files
on a real local run, each refused or left out with one line by `status`, `logs --hang` and
`collect`: nothing accepted in silence, no traceback, nothing blocked, lost or left behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

COUNTS = ("cases tried", "handled (one-line error / recovered)", "lost data", "tracebacks", "accepted in silence",
          "blocked", "left behind", "other")


@pytest.mark.slow     # a real run copied for each of 39 cases (the developer tier leaves them to the full suite)
def test_every_data_case_is_handled(repo: Path) -> None:
    result = subprocess.run([sys.executable, str(repo / "benchmarks" / "reliability.py"), "--group", "data",
                             "--jobs", "4"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    counts = {name: int(value) for name, value in re.findall(r"^([a-z][^:\n]*): (\d+)$", result.stdout, re.M)}
    assert set(COUNTS) <= set(counts), result.stdout
    assert counts["cases tried"] >= 39, result.stdout
    assert counts["handled (one-line error / recovered)"] == counts["cases tried"], result.stdout
    assert all(counts[name] == 0 for name in COUNTS[2:]), result.stdout
