"""The house's bars, besides the rooms and cycles of tests/test_layers.py: no module of
hpcprof/ over MAX_LINES lines; ruff and mypy clean (configured in pyproject.toml; tests/run.sh also
runs both before pytest, so that CI stops on them at once); and the fast tier (the tests not marked
slow: tests/run.sh --fast) tests every level of rooms."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAST_FILES
from test_layers import LAYERS, LEVEL, room_of

REPO = Path(__file__).resolve().parents[1]
#: the most lines a module of hpcprof/ may have
MAX_LINES = 600
#: modules still over MAX_LINES while a branch splits them (path under hpcprof/: since when, which
#: branch); the lead deletes each line when its branch is merged. Nothing else may be added here.
TEMPORARY: dict[str, str] = {
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


@pytest.mark.slow
def test_ruff_and_mypy_are_clean() -> None:
    for tool in (["ruff", "check", "hpcprof", "tests", "benchmarks"], ["mypy"]):
        done = subprocess.run([sys.executable, "-m", *tool], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr


#: what runs hpcprof's command line: the test helper (`python -m hpcprof`) and click's entry point
RUNS_THE_CLI = {"hpcprof_cli", "hpcprof.cli"}
#: the modules every run of the command line uses: the entry point and the options all commands share
THE_CLI = {"hpcprof.__main__", "hpcprof.cli", "hpcprof.cli_options"}


def hpcprof_modules(path: Path, seen: set[Path] | None = None) -> set[str]:
    """The hpcprof modules a test file imports, at the top or inside its functions, and those of the
    test helpers it imports (one that runs the command line: THE_CLI)."""
    seen = seen if seen is not None else set()
    seen.add(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        for name in names:
            helper = path.parent / f"{name}.py"
            if name in RUNS_THE_CLI:
                found |= THE_CLI
            if name.split(".")[0] == "hpcprof":
                found.add(name)
            elif helper.exists() and helper not in seen:
                found |= hpcprof_modules(helper, seen)
    return found


def test_the_fast_tier_tests_every_level_of_rooms(request: pytest.FixtureRequest) -> None:
    """Each level of LAYERS has a module that a test file of the fast tier imports (a file with a
    test not marked slow), so that marking tests slow never leaves a room untested in a developer's loop."""
    collected = request.config.stash.get(FAST_FILES, {})
    if set(collected) != set((REPO / "tests").glob("test_*.py")):
        pytest.skip("a run of every test file (the full suite, or the fast tier) shows which files are fast")
    fast = sorted(path for path, has_fast in collected.items() if has_fast)
    levels = {LEVEL[room_of(module)] for path in fast for module in hpcprof_modules(path)}
    assert [rooms for level, rooms in enumerate(LAYERS) if level not in levels] == []
