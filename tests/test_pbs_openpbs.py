"""PBS against a real OpenPBS 23.06.06 server (the open-source PBS Pro that Polaris runs).

Recorded `qstat -f -F json` / `qstat -xf -F json` output of that server (tests/data/qstat/openpbs,
from shared/tools/openpbs/samples) checks the parser; then `hpcprof submit --site pbs-local`
(Polaris's PBS rendering: select ...:system=polaris, filesystems, debug queue, account; Hydra
mpiexec instead of PALS) runs jobs on the server started by tests/pbs_server.py and checks every
end state through the real qstat/qdel: COMPLETED, FAILED with the code, TIMEOUT, CANCELLED.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hpcprof_cli import hpcprof
from slurm_cluster import poll

from hpcprof.schedulers.base import CANCELLED, COMPLETED, FAILED, PENDING, RUNNING, TIMEOUT
from hpcprof.schedulers.pbs import parse_qstat_json

REPO = Path(__file__).resolve().parents[1]
RECORDED = Path(__file__).parent / "data" / "qstat" / "openpbs"
HELLO = REPO / "examples" / "command_hello.yaml"


@pytest.mark.parametrize(("sample", "job", "state", "exit_code", "words"), [
    ("1-normal.running.json", "2.vm", RUNNING, None, "job_state=R"),
    ("1-normal.finished.json", "2.vm", COMPLETED, 0, "and finished"),
    ("2-exit3.finished.json", "3.vm", FAILED, 3, "Exit_status=3"),
    ("3-walltime.finished.json", "4.vm", TIMEOUT, -29, "exceeded resource walltime"),
    ("4-qdel-running.finished.json", "5.vm", CANCELLED, 128 + 15, "killed by SIGTERM"),
    ("5-qdel-held.held.json", "6.vm", PENDING, None, "job_state=H"),
    ("5-qdel-held.finished.json", "6.vm", CANCELLED, None, "no exit status"),
    ("6-array.running.json", "7[].vm", RUNNING, None, "Job Array Began"),
    ("6-array.finished.json", "7[].vm", FAILED, 0, "substate 93"),   # subjob 2 exited 2
    ("6-array.finished-subjob2.json", "7[2].vm", FAILED, 2, "Exit_status=2"),
    ("11-system-aurora.queued.json", "12.vm", PENDING, None, "Can Never Run"),
    ("12-waiting.queued.json", "14.vm", PENDING, None, "Not Running"),
    ("10-special-chars.finished.json", "10.vm", COMPLETED, 0, "and finished"),
])
def test_recorded_openpbs_qstat_json(sample: str, job: str, state: str, exit_code: int | None,
                                     words: str) -> None:
    result = parse_qstat_json((RECORDED / sample).read_text(), job)
    assert (result.state, result.exit_code) == (state, exit_code)
    assert words in result.reason


def submit(env: dict[str, str], workdir: Path, *args: str) -> tuple[str, str, int]:
    """Submit HELLO to pbs-local with ARGS; returns run id, job id and the exit code."""
    proc = hpcprof("submit", str(HELLO), "--site", "pbs-local", *args, env=env, workdir=workdir)
    match = re.search(r"submitted (\S+) as (\S+)", proc.stderr)
    assert match, f"no submission in output (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return match[1], match[2], proc.returncode


def status(env: dict[str, str], workdir: Path, run_id: str) -> dict[str, Any]:
    proc = hpcprof("status", run_id, "--format", "json", env=env, workdir=workdir)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    return row


def qstat_x(env: dict[str, str], job_id: str) -> dict[str, Any]:
    proc = subprocess.run(["qstat", "-xf", "-F", "json", job_id], capture_output=True, text=True,
                          env=env, timeout=30, check=True)
    return next(iter(json.loads(proc.stdout)["Jobs"].values()))


def finished(env: dict[str, str], job_id: str) -> dict[str, Any]:
    """The job's record once the server has finished it (`--wait` returns when the job's own status
    file says it ended, which can be a moment before the server writes Exit_status)."""
    return poll(lambda: qstat_x(env, job_id), lambda j: j["job_state"] == "F" and "Exit_status" in j, 60)


def test_completed_through_the_polaris_rendering(openpbs: dict[str, str], tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    run_id, job_id, rc = submit(openpbs, workdir, "--wait")
    assert rc == 0
    row = status(openpbs, workdir, run_id)
    assert (row["state"], row["exit_code"], row["job_id"]) == ("COMPLETED", 0, job_id)
    job = finished(openpbs, job_id)
    assert (job["job_state"], job["Exit_status"], job["queue"]) == ("F", 0, "debug")
    assert job["Resource_List"]["filesystems"] == "home:eagle"
    assert job["Resource_List"]["select"] == "1:system=polaris"
    path = workdir / "hello" / run_id
    for rank in (0, 1):
        assert f"rank {rank} of run {run_id}" in (path / "logs" / f"rank{rank}.log").read_text()
    assert f"rank 1 of run {run_id}" in (path / "logs" / "job.out").read_text()   # -k doe, -o in RUN_DIR
    collected = hpcprof("collect", run_id, env=openpbs, workdir=workdir)
    assert collected.returncode == 0, collected.stderr


def test_exit_code_is_failed_with_the_code(openpbs: dict[str, str], tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    argv = '[bash, -c, "exit $(( HPCPROF_RANK == 1 ? 3 : 0 ))"]'
    run_id, job_id, rc = submit(openpbs, workdir, "--wait", "--set", f"workload.argv={argv}")
    assert rc == 1
    row = status(openpbs, workdir, run_id)
    assert (row["state"], row["exit_code"]) == ("FAILED", 3)
    assert finished(openpbs, job_id)["Exit_status"] == 3


def test_walltime_exceeded_is_timeout(openpbs: dict[str, str], tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    run_id, job_id, rc = submit(openpbs, workdir, "--wait", "--set", "resources.walltime='00:00:05'",
                                "--set", 'workload.argv=[sleep, "120"]')
    assert rc == 1
    row = status(openpbs, workdir, run_id)
    assert row["state"] == "TIMEOUT", row
    assert finished(openpbs, job_id)["Exit_status"] == -29


def test_cancel_running_is_cancelled(openpbs: dict[str, str], tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    run_id, job_id, rc = submit(openpbs, workdir, "--set", 'workload.argv=[sleep, "300"]',
                                "--set", "resources.walltime='00:02:00'")
    assert rc == 0
    poll(lambda: status(openpbs, workdir, run_id)["state"], lambda s: s == "RUNNING", 60)
    cancelled = hpcprof("cancel", run_id, env=openpbs, workdir=workdir)
    assert cancelled.returncode == 0, cancelled.stderr
    final = poll(lambda: status(openpbs, workdir, run_id)["state"], lambda s: s != "RUNNING", 60)
    assert final == "CANCELLED"
    job = poll(lambda: qstat_x(openpbs, job_id), lambda j: j["job_state"] == "F", 60)
    assert job["substate"] == 91, job      # JOB_SUBSTATE_TERMINATED: deleted by qdel
