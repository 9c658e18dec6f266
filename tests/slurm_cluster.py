"""The local one-node Slurm (../shared/tools/slurm-local.sh) as session fixtures.

`slurm_cluster` makes sure `sinfo` answers and the node takes jobs: if not, and we are root, it
runs `slurm-local.sh start` (a few seconds); otherwise the test is skipped with the reason
(conftest turns skips into failures under CI=true). `torque_cluster` adds the Torque wrappers.
`time_limit_jobs` runs the jobs that wait for Slurm's time limit (TIME_LIMIT_JOBS) side by side.
Knobs: HPCPROF_SLURM_LOCAL (path of slurm-local.sh; default $HPCPROF_SHARED/tools/, as in
tests/run.sh), and the script's own (STATE, CPUS, TORQUE, AUTH, ACCT), defaulting here to
CPUS=6 TORQUE=1 so that the time-limit jobs (1 + 2 + 3 ranks) run side by side and qsub/qstat/qdel work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("HPCPROF_SHARED", REPO.parent / "shared"))
SCRIPT = Path(os.environ.get("HPCPROF_SLURM_LOCAL", SHARED / "tools" / "slurm-local.sh"))
USABLE = ("idle", "mixed", "allocated", "completing")
T = TypeVar("T")


def _node_state() -> str:
    """The state `sinfo` reports for the node(s), or why there is none. `scontrol ping` first:
    it fails at once when slurmctld is down, where sinfo retries for ~9 s."""
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20,
                              check=False)
        if ping.returncode != 0:
            return "slurmctld is down"
        proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                              timeout=20, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return f"sinfo: {exc}"
    return proc.stdout.strip() if proc.returncode == 0 else f"sinfo: {proc.stderr.strip()}"


def _usable(state: str) -> bool:
    return any(line.strip().rstrip("*~#") in USABLE for line in state.splitlines())


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """A running local Slurm that takes jobs; returns the `sinfo` node state."""
    if shutil.which("sbatch") is None:
        pytest.skip(f"Slurm is not installed: run `TORQUE=1 bash {SCRIPT} install` as root")
    state = _node_state()
    if _usable(state):
        return state
    if os.geteuid() != 0 or not SCRIPT.is_file():
        pytest.skip(f"Slurm is not running ({state}) and cannot be started here "
                    f"(root: {os.geteuid() == 0}, {SCRIPT} exists: {SCRIPT.is_file()})")
    env = {"CPUS": "6", "TORQUE": "1", **os.environ}
    proc = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    state = _node_state()
    if proc.returncode != 0 or not _usable(state):
        pytest.skip(f"`{SCRIPT} start` did not bring up Slurm (rc {proc.returncode}, "
                    f"node {state!r}): {(proc.stderr or proc.stdout).strip()[-500:]}")
    # the controller started now recovered the queue of an earlier, killed run: empty it
    subprocess.run(["bash", str(REPO / "tests" / "services" / "cancel-recovered.sh")], timeout=60, check=True)
    return state


@pytest.fixture(scope="session")
def torque_cluster(slurm_cluster: str) -> str:
    """The local Slurm with Slurm's Torque wrappers (qsub, qstat, qdel) installed."""
    missing = [tool for tool in ("qsub", "qstat", "qdel") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: run `TORQUE=1 bash {SCRIPT} install` as root")
    return slurm_cluster


#: the jobs that end at Slurm's time limit, by name: each takes its own empty directory and returns
#: what its test asserts on (the test modules that import this add theirs)
TIME_LIMIT_JOBS: dict[str, Callable[[Path], object]] = {}


@pytest.fixture(scope="session")
def time_limit_jobs(slurm_cluster: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Future[object]]:
    """Every TIME_LIMIT_JOBS job started at once and waited for, name -> its finished Future (a
    job's error is raised by `.result()` in its own test). Slurm's limits are whole minutes, checked
    lazily: a 1-minute job ends 76-120 s after its start here, so the tests wait for that once, side
    by side on the node's CPUs, and no other test of the one-node Slurm's group runs meanwhile."""
    with ThreadPoolExecutor(max(1, len(TIME_LIMIT_JOBS))) as pool:
        return {name: pool.submit(job, tmp_path_factory.mktemp(name)) for name, job in TIME_LIMIT_JOBS.items()}


def write_job(run_dir: Path, directives: list[str], body: str) -> Path:
    """A job script shaped like hpcprof's: status lines (start, job_id, exit_code, end), DONE."""
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    script = run_dir / "job.sh"
    script.write_text("\n".join([
        "#!/bin/bash", *directives,
        f"RUN_DIR='{run_dir.resolve()}'",
        'cd "$RUN_DIR" || exit 1',
        """hp_status() { printf '%s=%s\\n' "$1" "$2" >> "$RUN_DIR/status"; }""",
        'hp_status start "$(date +%s)"',
        'hp_status job_id "${PBS_JOBID:-${SLURM_JOB_ID:-$$}}"',
        body,
        "hp_rc=$?",
        'hp_status exit_code "$hp_rc"',
        'hp_status end "$(date +%s)"',
        'touch "$RUN_DIR/DONE"',
        'exit "$hp_rc"', ""]))
    return script


def poll(probe: Callable[[], T], until: Callable[[T], bool], timeout: float) -> T:
    """Call `probe` with a backoff (0.2 s growing to 3 s) until `until(result)`; fail at timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.2
    while True:
        result = probe()
        if until(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"still {result!r} after {timeout:.0f} s")
        time.sleep(delay)
        delay = min(delay * 1.5, 3.0)
