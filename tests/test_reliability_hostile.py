"""The `hostile` group of benchmarks/reliability.py in CI: every case of its classes
(links out of the run directory, outputs over inputs, workdir files and special files, spreadsheet
formulas, hangs, unbounded reads and orphaned workers, rich markup, escape sequences and live links)
handled, class by class."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from reliability_util import every_case_handled

pytestmark = pytest.mark.slow

CLASSES = ("class 1", "class 2", "class 3", "class 4", "class 6", "class 7")


def test_every_hostile_case_is_handled(repo: Path, fixtures_dir: Path) -> None:
    out = every_case_handled(repo, fixtures_dir, "hostile", at_least=120, timeout=1200)
    per_class = dict(re.findall(r"^  (class \d): (\d+) of \d+ handled$", out, re.M))
    assert set(per_class) == set(CLASSES), out
