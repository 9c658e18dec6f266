"""PbsScheduler / TorqueScheduler: parsing of recorded `qstat` output (PBS Pro JSON as on Polaris, hand-written to
its shape; Torque-style `qstat -f` captured from Slurm's Torque wrappers), and submit/state/cancel
through those wrappers (qsub/qstat/qdel) on the real local Slurm."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_cluster import poll, write_job

from hpcprof.campaign.jobstate import reconcile
from hpcprof.core.errors import UserError
from hpcprof.run.rundir import RunDir
from hpcprof.schedulers import get_scheduler
from hpcprof.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    OUT_OF_MEMORY,
    PENDING,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    JobState,
)
from hpcprof.schedulers.pbs import (
    PbsScheduler,
    TorqueScheduler,
    parse_qstat_full,
    parse_qstat_full_all,
    parse_qstat_json,
    parse_qsub,
)

DATA = Path(__file__).parent / "data" / "qstat"
POLARIS = "polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"


def test_parse_qsub_keeps_long_ids() -> None:
    assert parse_qsub(f"308834.{POLARIS}\n") == f"308834.{POLARIS}"
    assert parse_qsub("12\n") == "12"
    assert parse_qsub("1234[].pbs01\n") == "1234[].pbs01"
    with pytest.raises(ValueError):
        parse_qsub("qsub: Unknown queue\n")


# Cases the real OpenPBS could not be made to produce here (test_pbs_openpbs.py has the recorded
# ones): memory kill, a signal, and a PBS Pro release that writes invalid escapes; written from
# OpenPBS's job.h and PBS Pro output seen in the field.
@pytest.mark.parametrize(("fixture", "state", "exit_code", "words"), [
    ("pbspro_mem.json", OUT_OF_MEMORY, -27, "JOB_EXEC_KILL_MEM"),
    ("pbspro_signal.json", FAILED, 128 + 9, "killed by SIGKILL"),
    ("pbspro_bad_escape.json", FAILED, 3, "Exit_status=3"),  # invalid JSON escape in an env var
])
def test_pbspro_json(fixture: str, state: str, exit_code: int | None, words: str) -> None:
    text = (DATA / fixture).read_text()
    number = next(line for line in text.splitlines() if POLARIS + '":{' in line).split('"')[1]
    result = parse_qstat_json(text, number)
    assert (result.state, result.exit_code) == (state, exit_code)
    assert words in result.reason
    assert parse_qstat_json(text, number.split(".")[0]) == result  # short id: same job


def test_pbspro_json_other_job() -> None:
    text = (DATA / "pbspro_mem.json").read_text()
    assert parse_qstat_json(text, f"1.{POLARIS}").state == UNKNOWN


@pytest.mark.parametrize(("fixture", "cancelled", "expected"), [
    ("torque_wrapper_queued.txt", False, JobState(PENDING, None, "job_state=Q")),
    ("torque_wrapper_running.txt", False, JobState(RUNNING, None, "job_state=R")),
    ("torque_wrapper_completed.txt", False, JobState(
        COMPLETED, None, "job_state=C; no exit status (the run's status file has it)")),
    ("torque_wrapper_deleted.txt", True, JobState(
        COMPLETED, None, "job_state=C; no exit status (the run's status file has it)")),
])
def test_torque_wrapper_recorded(tmp_path: Path, fixture: str, cancelled: bool, expected: JobState) -> None:
    """The wrappers cannot say a job was deleted: the run's `cancelled=` line (hpcprof.campaign.jobstate) does."""
    text = (DATA / fixture).read_text()
    assert parse_qstat_full(text) == expected
    job_id = text.split("Job Id:", 1)[1].split()[0]
    assert parse_qstat_full_all(text + text.replace(job_id, "999"), [job_id, "998"]) == {
        job_id: expected, "998": JobState(UNKNOWN, None, "job 998 unknown or finished; the run's status file decides")}
    if cancelled:
        RunDir(tmp_path).mark_cancelled()
        assert reconcile(RunDir(tmp_path), parse_qstat_full(text)).state == CANCELLED


@pytest.mark.parametrize(("exit_status", "state", "exit_code"), [
    ("0", COMPLETED, 0), ("3", FAILED, 3), ("-11", TIMEOUT, -11), ("-10", OUT_OF_MEMORY, -10),
    ("271", CANCELLED, 143), ("-1", FAILED, -1),
])
def test_real_torque_exit_status(exit_status: str, state: str, exit_code: int) -> None:
    """Real Torque adds `exit_status` (Adaptive docs: -11 walltime, -10 memory, 271 qdel)."""
    recorded = (DATA / "torque_wrapper_completed.txt").read_text()
    text = recorded.replace("\tegroup", f"\texit_status = {exit_status}\n\tegroup")
    result = parse_qstat_full(text)
    assert (result.state, result.exit_code) == (state, exit_code)


def test_registry_and_missing_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scheduler = get_scheduler("pbs")
    assert isinstance(scheduler, PbsScheduler) and not isinstance(scheduler, TorqueScheduler)
    assert (scheduler.name, scheduler.template) == ("pbs", "pbs.sh.j2")
    assert isinstance(get_scheduler("torque"), TorqueScheduler)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="qstat"):
        scheduler.state("1", tmp_path)


# ------------------------------------------------------------------------------------------
# Slurm's Torque wrappers on the real local Slurm


def submit(run_dir: Path, body: str) -> tuple[TorqueScheduler, str]:
    script = write_job(run_dir, ["#PBS -N hp-torque", "#PBS -l select=1:ncpus=1",
                                 "#PBS -l walltime=00:02:00", "#PBS -l filesystems=home:eagle",
                                 "#PBS -q debug", "#PBS -j oe", "#PBS -o ignored.out"], body)
    scheduler = TorqueScheduler()
    return scheduler, scheduler.submit(script, run_dir)


def final(scheduler: TorqueScheduler, job_id: str, run_dir: Path) -> JobState:
    return poll(lambda: scheduler.state(job_id, run_dir), lambda s: s.terminal, 90)


@pytest.mark.torque
@pytest.mark.usefixtures("torque_cluster")
def test_qsub_completed(tmp_path: Path) -> None:
    scheduler, job_id = submit(tmp_path, 'echo "PBS_JOBID=$PBS_JOBID"; echo to-stderr >&2')
    state = final(scheduler, job_id, tmp_path)
    assert state.state == COMPLETED and state.exit_code is None  # the wrappers give no exit code
    assert reconcile(RunDir(tmp_path), state) == JobState(COMPLETED, 0, "")
    out = (tmp_path / "logs" / "job.out").read_text()  # -j oe -o from the command line
    assert f"PBS_JOBID={job_id}" in out and "to-stderr" in out
    assert not (tmp_path / "ignored.out").exists()


@pytest.mark.torque
@pytest.mark.usefixtures("torque_cluster")
def test_qsub_exit_3(tmp_path: Path) -> None:
    scheduler, job_id = submit(tmp_path, "bash -c 'exit 3'")
    state = final(scheduler, job_id, tmp_path)
    assert state.terminal
    assert reconcile(RunDir(tmp_path), state) == JobState(FAILED, 3, "exit code 3")


@pytest.mark.torque
@pytest.mark.usefixtures("torque_cluster")
def test_qdel_running_job(tmp_path: Path) -> None:
    scheduler, job_id = submit(tmp_path, "sleep 300")
    poll(lambda: scheduler.state(job_id, tmp_path), lambda s: s.state == RUNNING, 60)
    assert scheduler.cancel(job_id, tmp_path) is True  # a live job: hpcprof.campaign.jobstate marks the run
    RunDir(tmp_path).mark_cancelled()
    state = final(scheduler, job_id, tmp_path)
    assert reconcile(RunDir(tmp_path), state).state == CANCELLED  # the wrappers' `C` cannot say it
    assert scheduler.cancel(job_id, tmp_path) is False  # again: already ended, no error


@pytest.mark.torque
@pytest.mark.usefixtures("torque_cluster")
def test_unknown_job_is_left_to_the_run_dir(tmp_path: Path) -> None:
    scheduler = TorqueScheduler()
    state = scheduler.state("99999999", tmp_path)
    assert state.state == UNKNOWN and "rc 153" in state.reason
    assert scheduler.cancel("99999999", tmp_path) is False  # no error, nothing to mark
