"""The one way the tests run the real command line: `python -m hpcprof ARGS` in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def hpcprof(*args: str, cwd: Path | None = None, workdir: Path | None = None,
            env: Mapping[str, str | None] | None = None, timeout: float = 300,
            check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `python -m hpcprof ARGS` (with `--workdir WORKDIR` appended when `workdir` is given) in
    `cwd` (default: the workdir's parent, else the current directory). `env` is laid over this
    process's environment (a None value removes the variable). `check`: an exit status other than 0
    fails the test with the command's output."""
    merged = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    argv = [sys.executable, "-m", "hpcprof", *args, *(["--workdir", str(workdir)] if workdir is not None else [])]
    result = subprocess.run(argv, cwd=cwd if cwd is not None or workdir is None else workdir.parent,
                            capture_output=True, text=True, timeout=timeout, env=merged, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"hpcprof {' '.join(args)} -> {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result
