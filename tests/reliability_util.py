"""Helpers of the reliability suite (tests/test_reliability_*.py): the checks every bad-input case
makes (one line, exit code 2, no traceback) and the run states it reads (the CLI: tests/hpcprof_cli.py)."""

from __future__ import annotations

import json
import subprocess
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
