"""End to end on the real local Slurm: `hpcprof submit --site slurm-local` (rendered job script,
srun --mpi=pmi2, rank wrapper, run directory), then `hpcprof status` / `cancel` / `collect`, for a
run that completes, one whose rank exits non-zero, one cancelled while running and one that
exceeds its time limit."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hpcprof_cli import hpcprof
from slurm_cluster import TIME_LIMIT_JOBS, poll

REPO = Path(__file__).resolve().parents[1]
HELLO = REPO / "examples" / "command_hello.yaml"

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]


def submit(workdir: Path, *args: str, timeout: float = 300) -> tuple[str, str, int]:
    """Submit HELLO to slurm-local with ARGS; returns run id, job id and the exit code."""
    proc = hpcprof("submit", str(HELLO), "--site", "slurm-local", *args, timeout=timeout, workdir=workdir)
    match = re.search(r"submitted (\S+) as (\d+)", proc.stderr)  # progress goes to stderr
    assert match, f"no submission in output (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return match[1], match[2], proc.returncode


def status(workdir: Path, run_id: str) -> dict[str, Any]:
    proc = hpcprof("status", run_id, "--format", "json", workdir=workdir)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    return row


def run_dir(workdir: Path, run_id: str) -> Path:
    return workdir / "hello" / run_id


def test_completed_with_outputs(tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    run_id, job_id, rc = submit(workdir, "--wait")
    assert rc == 0
    row = status(workdir, run_id)
    assert (row["state"], row["exit_code"], row["job_id"]) == ("COMPLETED", 0, job_id)
    path = run_dir(workdir, run_id)
    assert (path / "DONE").exists() and "exit_code=0" in (path / "status").read_text()
    for rank in (0, 1):
        assert f"rank {rank} of run {run_id}" in (path / "logs" / f"rank{rank}.log").read_text()
    assert f"rank 1 of run {run_id}" in (path / "logs" / "job.out").read_text()
    collected = hpcprof("collect", run_id, workdir=workdir)
    assert collected.returncode == 0, collected.stderr
    assert any((path / "results").iterdir())


def test_rank_exit_nonzero_is_failed(tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    argv = '[bash, -c, "exit $(( HPCPROF_RANK == 1 ? 3 : 0 ))"]'
    run_id, _, rc = submit(workdir, "--wait", "--set", f"workload.argv={argv}")
    assert rc == 1
    row = status(workdir, run_id)
    assert (row["state"], row["exit_code"]) == ("FAILED", 3)


def test_a_dead_rank_ends_the_job_instead_of_the_walltime(tmp_path: Path) -> None:
    """srun --kill-on-bad-exit: rank 1 exits 3 at once while rank 0 would sleep for 5 minutes; the
    step (and the job) ends in seconds, not at the 10-minute walltime: FAILED, the reason naming
    rank 1's code (the job's own code is srun's, 143 for the rank it stopped)."""
    workdir = tmp_path / "runs"
    argv = '[bash, -c, "if [ $HPCPROF_RANK = 1 ]; then exit 3; else sleep 300; fi"]'
    started = time.monotonic()
    run_id, _, rc = submit(workdir, "--wait", "--set", f"workload.argv={argv}", timeout=200)
    assert rc == 1 and time.monotonic() - started < 120
    row = status(workdir, run_id)
    assert row["state"] == "FAILED" and row["exit_code"] != 0
    assert "rank 1 exited with code 3 first" in row["reason"]
    assert "--kill-on-bad-exit=1" in (run_dir(workdir, run_id) / "job.sh").read_text()


def test_cancel_running(tmp_path: Path) -> None:
    workdir = tmp_path / "runs"
    run_id, _, rc = submit(workdir, "--set", 'workload.argv=[sleep, "300"]',
                           "--set", "resources.walltime='00:02:00'")  # no stray job if it fails
    assert rc == 0
    poll(lambda: status(workdir, run_id)["state"], lambda s: s == "RUNNING", 60)
    cancelled = hpcprof("cancel", run_id, workdir=workdir)
    assert cancelled.returncode == 0, cancelled.stderr
    final = poll(lambda: status(workdir, run_id)["state"], lambda s: s != "RUNNING", 60)
    assert final == "CANCELLED"
    assert not (run_dir(workdir, run_id) / "DONE").exists()


def time_limit_run(tmp_path: Path) -> tuple[Path, str, int]:
    """walltime 1 min on `sleep 600`, submitted with --wait: the workdir, run id and exit code."""
    workdir = tmp_path / "runs"
    run_id, _, rc = submit(workdir, "--wait", "--set", "resources.walltime='00:01:00'",
                           "--set", 'workload.argv=[sleep, "600"]', timeout=400)
    return workdir, run_id, rc


TIME_LIMIT_JOBS["e2e"] = time_limit_run


def test_time_limit_is_timeout(time_limit_jobs: dict) -> None:
    """walltime 1 min: Slurm kills the job at its next limit check (76-120 s here; run beside the
    other time-limit jobs by `time_limit_jobs`)."""
    workdir, run_id, rc = time_limit_jobs["e2e"].result()
    assert rc == 1
    row = status(workdir, run_id)
    assert row["state"] == "TIMEOUT"
    assert "DUE TO TIME LIMIT" in (run_dir(workdir, run_id) / "logs" / "job.out").read_text()
