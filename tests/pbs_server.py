"""The local one-node OpenPBS (../shared/tools/openpbs/pbs-local.sh) as a session fixture.

`openpbs` makes sure the server answers `qstat -Q` and the node is free: if not, and we are root,
it runs `pbs-local.sh install` and `start` (about 25 s the first time) with LINK_BIN=0, so that
OpenPBS's qsub/qstat/qdel stay in /opt/pbs/bin and do not shadow Slurm's Torque wrappers used by
other tests; otherwise the test is skipped with the reason (conftest turns skips into failures
under CI=true). The fixture returns the environment for commands that must reach OpenPBS
(/opt/pbs/bin first on PATH).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("HPCPROF_SHARED", REPO.parent / "shared"))
SCRIPT = Path(os.environ.get("HPCPROF_PBS_LOCAL", SHARED / "tools" / "openpbs" / "pbs-local.sh"))
PBS_BIN = Path("/opt/pbs/bin")


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{PBS_BIN}:{os.environ.get('PATH', '')}"}


def _node_free() -> bool:
    try:
        proc = subprocess.run([str(PBS_BIN / "pbsnodes"), "-a"], capture_output=True, text=True,
                              timeout=30, check=False, env=_env())
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and "state = free" in proc.stdout


@pytest.fixture(scope="session")
def openpbs() -> dict[str, str]:
    """A running OpenPBS with Polaris's resources; returns the environment that reaches it."""
    if _node_free():
        return _env()
    if os.geteuid() != 0 or not SCRIPT.is_file():
        pytest.skip(f"OpenPBS is not running and cannot be started here (root: {os.geteuid() == 0}, "
                    f"{SCRIPT} exists: {SCRIPT.is_file()})")
    env = {**os.environ, "LINK_BIN": "0"}
    for step in ("install", "start"):
        proc = subprocess.run(["bash", str(SCRIPT), step], capture_output=True, text=True, env=env,
                              timeout=300, check=False)
        if proc.returncode != 0:
            pytest.skip(f"`{SCRIPT} {step}` failed (rc {proc.returncode}): "
                        f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    if not _node_free():
        pytest.skip(f"`{SCRIPT} start` ran but the PBS node is not free")
    return _env()
