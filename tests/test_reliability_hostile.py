"""The `hostile` group of benchmarks/reliability.py (issue 46) in CI: every case of its classes
(links out of the run directory, outputs over inputs, workdir files and special files, spreadsheet
formulas, hangs, unbounded reads and orphaned workers, rich markup, escape sequences and live links)
handled, class by class."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

COUNTS = ("cases tried", "handled (one-line error / recovered)", "lost data", "tracebacks", "accepted in silence",
          "blocked", "left behind", "other")
CLASSES = ("class 1", "class 2", "class 3", "class 4", "class 6", "class 7")


def test_every_hostile_case_is_handled(repo: Path, fixtures_dir: Path) -> None:
    result = subprocess.run([sys.executable, str(repo / "benchmarks" / "reliability.py"), "--group", "hostile",
                             "--jobs", "4", "--fixtures", str(fixtures_dir)], capture_output=True, text=True,
                            timeout=1200)
    assert result.returncode == 0, result.stderr
    counts = {name: int(value) for name, value in re.findall(r"^([a-z][^:\n]*): (\d+)$", result.stdout, re.M)}
    assert set(COUNTS) <= set(counts), result.stdout
    assert counts["cases tried"] >= 120, result.stdout
    assert counts["handled (one-line error / recovered)"] == counts["cases tried"], result.stdout
    assert all(counts[name] == 0 for name in COUNTS[2:]), result.stdout
    per_class = dict(re.findall(r"^  (class \d): (\d+) of \d+ handled$", result.stdout, re.M))
    assert set(per_class) == set(CLASSES), result.stdout
