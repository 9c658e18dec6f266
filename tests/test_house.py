"""The house's bars (issue 44), besides the rooms and cycles of tests/test_layers.py: no module of
hpcprof/ over MAX_LINES lines, and ruff and mypy clean (configured in pyproject.toml; tests/run.sh
also runs both before pytest, so that CI stops on them at once)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the most lines a module of hpcprof/ may have
MAX_LINES = 600
#: modules still over MAX_LINES while a branch splits them (path under hpcprof/: since when, which
#: branch); the lead deletes each line when its branch is merged. Nothing else may be added here.
TEMPORARY: dict[str, str] = {
    "collect/runs.py": "2026-11-26, issue 44: split by job on the collect branch",
}


def module_lines() -> dict[str, int]:
    """Lines of each module of hpcprof/, by its path under hpcprof/."""
    root = REPO / "hpcprof"
    return {path.relative_to(root).as_posix(): len(path.read_text().splitlines()) for path in root.rglob("*.py")}


def test_no_module_over_the_line_limit() -> None:
    assert {path: n for path, n in module_lines().items() if n > MAX_LINES and path not in TEMPORARY} == {}


def test_every_temporary_exception_is_still_needed() -> None:
    """An exception whose module is split (or gone) is deleted, so the list never grows stale."""
    lines = module_lines()
    assert [path for path in TEMPORARY if lines.get(path, 0) <= MAX_LINES] == []


def test_ruff_and_mypy_are_clean() -> None:
    for tool in (["ruff", "check", "hpcprof", "tests", "benchmarks"], ["mypy"]):
        done = subprocess.run([sys.executable, "-m", *tool], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
