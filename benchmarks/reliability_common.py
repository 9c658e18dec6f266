"""What benchmarks/reliability.py and its case modules (reliability_faults.py, reliability_hostile.py,
reliability_silent.py) share: the classes of an outcome, running the CLI, and reading what a case left.
Its own module, so that the suite imports its case modules and they import nothing back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from hpcprof_cli import hpcprof  # noqa: E402  (tests/ is no package)

HANDLED, LOST, TRACEBACK, ACCEPTED, OTHER = "handled", "lost data", "traceback", "accepted in silence", "other"
BLOCKED, LEFT = "blocked", "left behind"


def cli(*args: str, cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m hpcprof ARGS` as its own process, run as the tests run it (tests/hpcprof_cli.py)."""
    return hpcprof(*args, cwd=cwd, timeout=timeout, env=env)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """HANDLED for exit 2 with exactly one `Error:` line, else the class of what happened."""
    if "Traceback" in result.stderr:
        return TRACEBACK
    if result.returncode == 0:
        return ACCEPTED
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    return HANDLED if result.returncode == 2 and len(errors) == 1 else OTHER


def run_dirs(workdir: Path) -> list[Path]:
    return sorted(p.parent for p in workdir.glob("*/*/config.json"))


def status(cwd: Path, run: Path) -> dict:
    result = cli("status", str(run), "--format", "json", cwd=cwd)
    return json.loads(result.stdout)[0] if result.returncode == 0 else {"state": "?", "stderr": result.stderr}


def write_exp(path: Path, argv: list[str], extra: str = "") -> Path:
    path.write_text(f"name: t\nworkload:\n  kind: command\n  argv: {json.dumps(argv)}\n"
                    f"resources:\n  nodes: 1\n  ranks_per_node: 1\n{extra}")
    return path
