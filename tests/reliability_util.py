"""Helpers of the reliability suite (tests/test_reliability_*.py): the checks every bad-input case
makes (one line, exit code 2, no traceback) and the run states it reads (the CLI: tests/hpcprof_cli.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from hpcprof_cli import hpcprof


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args}: {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Assert exit code 2, no traceback, and an `Error:` line holding `words`; return that line."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, f"{result.args}: {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def experiment(path: Path, argv: list[str], extra: str = "", ranks: int = 1) -> Path:
    """A command experiment file."""
    path.write_text(f"name: t\nworkload:\n  kind: command\n  argv: {json.dumps(argv)}\n"
                    f"resources:\n  nodes: 1\n  ranks_per_node: {ranks}\n{extra}")
    return path


def runs(workdir: Path) -> list[Path]:
    return sorted(p.parent for p in workdir.glob("*/*/config.json"))


def state(cwd: Path, run: Path) -> dict:
    [row] = json.loads(ok(hpcprof("status", str(run), "--format", "json", cwd=cwd)).stdout)
    return row


def wait_for(predicate, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


#: the counts benchmarks/reliability.py prints, handled first
GROUP_COUNTS = ("cases tried", "handled (one-line error / recovered)", "lost data", "tracebacks", "accepted in silence",
                "blocked", "left behind", "other")


def every_case_handled(repo: Path, fixtures_dir: Path, group: str, at_least: int, timeout: float) -> str:
    """Run the `group` of benchmarks/reliability.py (4 at a time) and check that it tried at least
    `at_least` cases and handled every one: nothing lost, no traceback, nothing accepted in silence,
    blocked or left behind. Its output, for the group's own checks."""
    result = subprocess.run([sys.executable, str(repo / "benchmarks" / "reliability.py"), "--group", group,
                             "--jobs", "4", "--fixtures", str(fixtures_dir)], capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stderr
    counts = {name: int(value) for name, value in re.findall(r"^([a-z][^:\n]*): (\d+)$", result.stdout, re.M)}
    assert set(GROUP_COUNTS) <= set(counts), result.stdout
    assert counts["cases tried"] >= at_least, result.stdout
    assert counts["handled (one-line error / recovered)"] == counts["cases tried"], result.stdout
    assert all(counts[name] == 0 for name in GROUP_COUNTS[2:]), result.stdout
    return result.stdout
