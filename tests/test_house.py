"""The house's bars, besides the rooms and cycles of tests/test_layers.py: no module of
hpcprof/ over MAX_LINES lines; ruff and mypy clean (configured in pyproject.toml; tests/run.sh also
runs both before pytest, so that CI stops on them at once); and the fast tier (the tests not marked
slow: tests/run.sh --fast) tests every level of rooms."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAST_FILES
from test_layers import LAYERS, LEVEL, cycles, room_of

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
THE_CLI = {"hpcprof.__main__", "hpcprof.cli", "hpcprof.cli.options"}


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


def script_imports(folder: Path) -> dict[str, set[str]]:
    """The scripts of a folder run from it (benchmarks/, tests/'s helpers) and the scripts of the same
    folder each imports, at the top or inside a function: what `python folder/x.py` puts on sys.path."""
    names = {path.stem for path in folder.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in folder.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module)
        graph[path.stem] = found & names - {path.stem}
    return graph


def test_no_import_cycle_among_scripts() -> None:
    """tests/test_layers.py keeps hpcprof/ free of cycles; the benchmarks and the tests' helpers import
    one another one way too (the reliability suite's case modules take its helpers from reliability_common)."""
    for folder in (REPO / "benchmarks", REPO / "benchmarks" / "gpu", REPO / "tests"):
        assert cycles(script_imports(folder)) == [], folder
    assert cycles({"reliability": {"reliability_faults"}, "reliability_faults": {"reliability"}}) != []


#: the trees whose text a reader of the repository reads (besides README.md and tests/fixtures/SOURCES.md)
TREES = ("hpcprof", "tests", "benchmarks", "docs", "templates", "site_configs", "examples")
#: the suffixes of their text files
TEXT = {".py", ".md", ".txt", ".sh", ".yaml", ".yml", ".j2", ".toml", ".cfg", ".ipynb"}
#: a reference to an issue or pull request of a tracker the reader cannot see (the word issue or PR with a
#: number, a number after "#" in brackets or after "see", "fixes", "closes"; test_the_issue_rule_tells_... shows
#: them); not "ProfilerStep#3", "all_reduce #6", "#1f77b4" or "`#1` of"
ISSUE_REF = re.compile(r"\bissues?[ _-]?#?\d|(?:\(|\bsee |\bfix(?:es|ed)? |\bclose[sd]? )#\d+\b|\b(?:PR|pull request) ?#?\d+",
                       re.IGNORECASE)


def text_files() -> list[Path]:
    """The text files of TREES (tests/fixtures: its SOURCES.md only), README.md."""
    files = [REPO / "README.md", REPO / "tests" / "fixtures" / "SOURCES.md"]
    for tree in TREES:
        files += [p for p in (REPO / tree).rglob("*") if p.suffix in TEXT and p.is_file()
                  and (REPO / "tests" / "fixtures") not in p.parents and "__pycache__" not in p.parts]
    return files


def test_no_issue_numbers() -> None:
    """Code, docs and results say what and why, never "see issue N": the reader has no tracker."""
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()[:100]}" for path in text_files()
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if ISSUE_REF.search(line)]
    assert found == []


def test_the_issue_rule_tells_references_from_counts() -> None:
    refs = ["(iss" "ue 46)", "Iss" "ue 17's parts", "iss" "ues 43-48", "iss" "ue #9", "fixes #" "3", "(#" "45)", "P" "R 12"]
    legit = ["ProfilerStep#3", "entered all_reduce #6", "color #1f77b4", "`#1`, `#2` in every figure",
             "#1 of 3", "lambda()#3", "tissue 3"]
    assert [t for t in refs if not ISSUE_REF.search(t)] == [] and [t for t in legit if ISSUE_REF.search(t)] == []


#: the commit after which every commit keeps the form below (main's head when the form was adopted)
FORM_SINCE = "3ccb797"
#: the verbs a subject starts with (imperative, capitalised)
VERBS = set("""Add Fix Remove Make Move Keep Use Split Merge Measure Record Document Test Name Refuse Read Write
Show Replace Rename Report Run Give Let Drop Check Speed Guard Handle Explain Attribute Extend Bound Validate Mark
Count Update Restore Revert State Say Put Find Compute Tell Skip Stop Start Cache Load Store Export Import Allow
Limit Reuse Route Derive Rebase Time Trim Simplify Clean Wire Arm Sample Plant Close Open Turn Bring Build Set
Collect Profile Render Submit List Print Parse Pass Return Raise Catch Share Shorten Lower Raise Reduce Avoid
Support Prefer Require Accept Reject Ignore Include Exclude Enable Disable Align Sort Group Join Filter Map Keep
Copy Link Unify Inline Extract Factor Lift Hoist Defer Delay Wait Retry Time Format Round Pin Bump Upgrade
Downgrade Declare Define Describe Note Clarify Correct Reword Regenerate Generate Mend Tidy Polish Harden Shrink
Grow Fill Free Release Kill End Finish Apply Register Expose Hide Draw Plot Place Land Ship Teach Dump Cancel Leave Match
Lead Re-base Cost Hold Compare Detect Sweep Gather""".split())


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=60)


def test_commit_messages_keep_the_form() -> None:
    """Every commit after FORM_SINCE: a subject of at most 72 characters that starts with a capitalised
    imperative verb (VERBS) and names no issue, subject and body alike."""
    try:
        inside = git("rev-parse", "--is-inside-work-tree").stdout.strip() == "true"
    except (OSError, subprocess.TimeoutExpired):
        inside = False
    if not inside:
        pytest.skip("not a git checkout: no commits to read")
    if git("merge-base", "--is-ancestor", FORM_SINCE, "HEAD").returncode != 0:
        pytest.skip(f"{FORM_SINCE} is not an ancestor of HEAD here (a shallow clone, or another history)")
    log = git("log", "--format=%h%x00%s%x00%b%x1e", f"{FORM_SINCE}..HEAD").stdout
    bad = []
    for entry in filter(str.strip, log.split("\x1e")):
        sha, subject, body = entry.strip("\n").split("\x00")
        if len(subject) > 72:
            bad.append(f"{sha} longer than 72 characters ({len(subject)}): {subject}")
        if subject.split(" ", 1)[0] not in VERBS:
            bad.append(f"{sha} starts with no imperative verb of VERBS: {subject}")
        if ISSUE_REF.search(subject) or ISSUE_REF.search(body):
            bad.append(f"{sha} names an issue: {subject}")
    assert bad == []
