"""SlurmScheduler: parsing of sbatch/sacct/scontrol output, and submit/state/cancel on the real
local Slurm (tools/slurm-local.sh: accounting off + jobcomp file by default, where state() falls
back to scontrol / sacct -c; the same tests pass with ACCT=dbd, where sacct answers first)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from slurm_cluster import TIME_LIMIT_JOBS, poll, write_job

from hpcprof.core.errors import UserError
from hpcprof.schedulers import get_scheduler
from hpcprof.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    NODE_FAIL,
    OUT_OF_MEMORY,
    PENDING,
    PREEMPTED,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    JobState,
)
from hpcprof.schedulers.slurm import (
    SlurmScheduler,
    exit_code_of,
    parse_sacct,
    parse_sbatch,
    parse_scontrol,
    to_job_state,
)

# Recorded on the local Slurm 22.05.8 (a job that exited 3, then one cancelled while running).
SCONTROL_FAILED = (
    "JobId=1 JobName=ok.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 "
    "Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) "
    "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:00 TimeLimit=01:00:00")
SCONTROL_CANCELLED_MULTILINE = """JobId=4 JobName=wrap
   JobState=CANCELLED Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15
"""
# `sacct -P -n -o JobID,State,ExitCode` with slurmdbd (ACCT=dbd), recorded on the local Slurm:
# completed, exit 3, cancelled while running, time limit. Job lines, then steps.
SACCT_DBD = """29|COMPLETED|0:0
29.batch|COMPLETED|0:0
29.0|COMPLETED|0:0
30|FAILED|3:0
30.batch|FAILED|3:0
30.0|FAILED|3:0
31|CANCELLED by 0|0:0
31.batch|CANCELLED|0:15
31.0|CANCELLED|0:15
32|TIMEOUT|0:0
32.batch|CANCELLED|0:15
"""


def test_parse_sbatch() -> None:
    assert parse_sbatch("42\n") == "42"
    assert parse_sbatch("42;localtest\n") == "42"
    with pytest.raises(ValueError):
        parse_sbatch("sbatch: error: Batch job submission failed\n")


@pytest.mark.parametrize(("text", "code"), [("0:0", 0), ("3:0", 3), ("0:15", 143), ("0:9", 137),
                                            ("", None), ("junk", None)])
def test_exit_code_of(text: str, code: int | None) -> None:
    assert exit_code_of(text) == code


@pytest.mark.parametrize(("slurm", "exit_text", "expected"), [
    ("PENDING", "0:0", JobState(PENDING, None, "PENDING")),
    ("RUNNING", "0:0", JobState(RUNNING, None, "RUNNING")),
    ("COMPLETING", "0:0", JobState(RUNNING, None, "COMPLETING")),
    ("COMPLETED", "0:0", JobState(COMPLETED, 0, "COMPLETED")),
    ("FAILED", "3:0", JobState(FAILED, 3, "FAILED")),
    ("CANCELLED by 0", "0:15", JobState(CANCELLED, 143, "CANCELLED by 0")),
    ("CANCELLED+", "0:0", JobState(CANCELLED, 0, "CANCELLED+")),
    ("TIMEOUT", "0:0", JobState(TIMEOUT, 0, "TIMEOUT")),
    ("DEADLINE", "0:0", JobState(TIMEOUT, 0, "DEADLINE")),
    ("NODE_FAIL", "0:0", JobState(NODE_FAIL, 0, "NODE_FAIL")),
    ("BOOT_FAIL", "0:0", JobState(NODE_FAIL, 0, "BOOT_FAIL")),
    ("OUT_OF_MEMORY", "0:9", JobState(OUT_OF_MEMORY, 137, "OUT_OF_MEMORY")),
    ("PREEMPTED", "0:0", JobState(PREEMPTED, 0, "PREEMPTED")),
    ("REQUEUED", "0:0", JobState(PENDING, None, "REQUEUED")),
    ("SOMETHING_NEW", "0:0", JobState(UNKNOWN, None, "SOMETHING_NEW")),
])
def test_to_job_state(slurm: str, exit_text: str, expected: JobState) -> None:
    assert to_job_state(slurm, exit_text) == expected

# `sacct -c -P -n -o JobID,State,ExitCode` (jobcomp/filetxt, no accounting storage), recorded:
# no steps, and TIMEOUT / CANCELLED logged with 0:0 (scontrol has 0:15).
SACCT_JOBCOMP = """4|CANCELLED|0:0
3|TIMEOUT|0:0
6|COMPLETED|0:0
7|FAILED|3:0
"""


@pytest.mark.parametrize(("job_id", "expected"), [
    ("3", JobState(TIMEOUT, 0, "TIMEOUT")),
    ("4", JobState(CANCELLED, 0, "CANCELLED")),
    ("6", JobState(COMPLETED, 0, "COMPLETED")),
    ("7", JobState(FAILED, 3, "FAILED")),
])
def test_parse_sacct_jobcomp_recorded(job_id: str, expected: JobState) -> None:
    assert parse_sacct(SACCT_JOBCOMP, job_id) == expected


@pytest.mark.parametrize(("job_id", "expected"), [
    ("29", JobState(COMPLETED, 0, "COMPLETED")),
    ("30", JobState(FAILED, 3, "FAILED")),
    ("31", JobState(CANCELLED, 143, "CANCELLED by 0")),  # signal from the batch step
    ("32", JobState(TIMEOUT, 143, "TIMEOUT")),
])
def test_parse_sacct_dbd_recorded(job_id: str, expected: JobState) -> None:
    assert parse_sacct(SACCT_DBD, job_id) == expected


def test_parse_sacct_no_job_line() -> None:
    assert parse_sacct(SACCT_DBD, "3") is None
    assert parse_sacct("29.batch|COMPLETED|0:0\n", "29") is None
    assert parse_sacct("", "29") is None


def test_parse_scontrol_recorded() -> None:
    assert parse_scontrol(SCONTROL_FAILED) == JobState(FAILED, 3, "FAILED NonZeroExitCode")
    assert parse_scontrol(SCONTROL_CANCELLED_MULTILINE) == JobState(CANCELLED, 143, "CANCELLED")
    assert parse_scontrol("slurm_load_jobs error: Invalid job id specified") is None


def test_registry_and_missing_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scheduler = get_scheduler("slurm")
    assert isinstance(scheduler, SlurmScheduler)
    assert (scheduler.name, scheduler.template) == ("slurm", "slurm.sh.j2")
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm clients at all
    with pytest.raises(UserError, match="sbatch"):
        scheduler.submit(tmp_path / "job.sh", tmp_path)


# ------------------------------------------------------------------------------------------
# The real cluster


def submit(run_dir: Path, body: str, *directives: str) -> tuple[SlurmScheduler, str]:
    """Submit a status-writing job (output to the relative logs/job.out: checks --chdir)."""
    script = write_job(run_dir, ["#SBATCH -J hp-test", "#SBATCH -o logs/job.out", *directives],
                       body)
    scheduler = SlurmScheduler()
    return scheduler, scheduler.submit(script, run_dir)


def status(run_dir: Path) -> dict[str, str]:
    lines = (run_dir / "status").read_text().splitlines() if (run_dir / "status").exists() else []
    return dict(line.split("=", 1) for line in lines)


def final(scheduler: SlurmScheduler, job_id: str, run_dir: Path, timeout: float = 90) -> JobState:
    return poll(lambda: scheduler.state(job_id, run_dir), lambda s: s.terminal, timeout)


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm_cluster")
def test_completed_two_ranks(tmp_path: Path) -> None:
    scheduler, job_id = submit(
        tmp_path, "srun bash -c 'echo rank=$SLURM_PROCID of $SLURM_NTASKS'",
        "#SBATCH -N 1", "#SBATCH --ntasks-per-node=2", "#SBATCH -t 2")
    assert job_id.isdigit()
    assert final(scheduler, job_id, tmp_path) == JobState(COMPLETED, 0, "COMPLETED")
    assert status(tmp_path)["exit_code"] == "0" and status(tmp_path)["job_id"] == job_id
    assert (tmp_path / "DONE").exists()
    out = (tmp_path / "logs" / "job.out").read_text()
    assert "rank=0 of 2" in out and "rank=1 of 2" in out


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm_cluster")
def test_rank_exit_3_is_failed_3(tmp_path: Path) -> None:
    scheduler, job_id = submit(
        tmp_path, "srun bash -c 'exit $(( SLURM_PROCID == 1 ? 3 : 0 ))'",
        "#SBATCH -N 1", "#SBATCH --ntasks-per-node=2", "#SBATCH -t 2")
    state = final(scheduler, job_id, tmp_path)
    assert (state.state, state.exit_code) == (FAILED, 3)
    assert status(tmp_path)["exit_code"] == "3"
    # the job-completion file (the fallback once scontrol has forgotten the job) agrees
    argv = ["sacct", "-c", "-P", "-n", "-j", job_id, "-o", "JobID,State,ExitCode"]
    sacct_c = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert parse_sacct(sacct_c, job_id) == JobState(FAILED, 3, "FAILED")


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm_cluster")
def test_cancel_running_job(tmp_path: Path) -> None:
    scheduler, job_id = submit(tmp_path, "srun sleep 300", "#SBATCH -t 2")
    poll(lambda: status(tmp_path), lambda s: "start" in s, 60)
    assert scheduler.state(job_id, tmp_path).state == RUNNING
    assert scheduler.cancel(job_id, tmp_path) is True  # a live job: hpcprof.campaign.jobstate marks the run
    state = final(scheduler, job_id, tmp_path, timeout=60)
    assert (state.state, state.exit_code) == (CANCELLED, 128 + 15)
    assert scheduler.cancel(job_id, tmp_path) is False  # again: already ended, no error


def time_limit_job(run_dir: Path) -> tuple[Path, JobState]:
    """`-t 1` on `sleep 600`: its run directory and final state."""
    scheduler, job_id = submit(run_dir, "sleep 600", "#SBATCH -t 1")
    return run_dir, final(scheduler, job_id, run_dir, timeout=240)


TIME_LIMIT_JOBS["sched"] = time_limit_job


@pytest.mark.slurm
def test_time_limit_is_timeout(time_limit_jobs: dict) -> None:
    """`-t 1`: Slurm kills the job at its next limit check (76-120 s here; run beside the other
    time-limit jobs by `time_limit_jobs`)."""
    run_dir, state = time_limit_jobs["sched"].result()
    assert state.state == TIMEOUT
    assert state.exit_code == 128 + 15  # scontrol's 0:15, more specific than jobcomp's 0:0
    assert "DUE TO TIME LIMIT" in (run_dir / "logs" / "job.out").read_text()


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm_cluster")
def test_unknown_job(tmp_path: Path) -> None:
    scheduler = SlurmScheduler()
    assert scheduler.state("99999999", tmp_path).state == UNKNOWN
    assert scheduler.cancel("99999999", tmp_path) is False  # no error, nothing to mark


@pytest.mark.slurm
@pytest.mark.usefixtures("slurm_cluster")
def test_sbatch_rejection_is_a_user_error(tmp_path: Path) -> None:
    script = write_job(tmp_path, ["#SBATCH --partition=no_such_partition"], "true")
    with pytest.raises(UserError, match="sbatch rejected"):
        SlurmScheduler().submit(script, tmp_path)
