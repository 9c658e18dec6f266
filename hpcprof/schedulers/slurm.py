"""Slurm: `sbatch --parsable`, state from `sacct -P` (or `scontrol show job` / `sacct -c` without
accounting storage), `scancel`.

Sources, most specific first: `sacct` (slurmdbd; lags the job end by a few seconds, so a
non-terminal answer is checked against `scontrol`), `scontrol show job` (pending, running and
jobs that ended less than MinJobAge ago; its ExitCode has the signal, e.g. 0:15 for TIMEOUT),
and the job-completion file through `sacct -c` (jobcomp/filetxt; logs TIMEOUT with ExitCode 0:0).
`squeue` adds nothing to `scontrol` here (same daemon, fewer fields) and is not asked.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Sequence

from hpcprof.errors import UserError
from hpcprof.schedulers.base import (
    CANCELLED, COMPLETED, FAILED, NODE_FAIL, OUT_OF_MEMORY, PENDING, PREEMPTED, RUNNING, TIMEOUT,
    UNKNOWN, JobState, Scheduler, run_command, submit_command,
)

#: Slurm job states (squeue/sacct/scontrol spelling) → normalised states.
SLURM_STATES: dict[str, str] = {
    **dict.fromkeys(("PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD",
                     "SPECIAL_EXIT"), PENDING),
    **dict.fromkeys(("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING",
                     "SIGNALING", "STAGE_OUT", "POWER_UP_NODE", "UPDATE_DB"), RUNNING),
    "COMPLETED": COMPLETED, "FAILED": FAILED, "CANCELLED": CANCELLED, "REVOKED": CANCELLED,
    "TIMEOUT": TIMEOUT, "DEADLINE": TIMEOUT,
    "NODE_FAIL": NODE_FAIL, "BOOT_FAIL": NODE_FAIL,
    "OUT_OF_MEMORY": OUT_OF_MEMORY, "PREEMPTED": PREEMPTED,
}

_ACCOUNTING_OFF = "accounting storage is disabled"


def _dependency(after: Sequence[str]) -> list[str]:
    return [f"--dependency=afterany:{':'.join(after)}"] if after else []


def parse_sbatch(stdout: str) -> str:
    """The job id from `sbatch --parsable` output (`ID` or `ID;cluster`)."""
    lines = stdout.strip().splitlines()
    job_id = lines[-1].split(";", 1)[0].strip() if lines else ""
    if not job_id.isdigit():
        raise ValueError(f"sbatch printed no job id: {stdout.strip()!r}")
    return job_id


def exit_code_of(slurm_exit: str) -> int | None:
    """Slurm's `code:signal` as one shell-style exit code (128+signal when a signal ended it)."""
    match = re.fullmatch(r"(\d+):(\d+)", slurm_exit.strip())
    if not match:
        return None
    code, signum = int(match[1]), int(match[2])
    return 128 + signum if signum else code


def to_job_state(slurm_state: str, slurm_exit: str = "", reason: str = "") -> JobState:
    """Normalise a Slurm state (e.g. `CANCELLED by 0`, `TIMEOUT`) and its `code:signal`."""
    word = slurm_state.split()[0].rstrip("+") if slurm_state.strip() else ""
    state = SLURM_STATES.get(word, UNKNOWN)
    exit_code = exit_code_of(slurm_exit) if state not in (PENDING, RUNNING, UNKNOWN) else None
    if state == COMPLETED and exit_code:
        state = FAILED
    detail = " ".join(s for s in (slurm_state.strip(), reason if reason != "None" else "") if s)
    return JobState(state, exit_code, detail)


def parse_sacct(stdout: str, job_id: str) -> JobState | None:
    """The job's own line in `sacct -P -n -o JobID,State,ExitCode`, or None. slurmdbd logs a
    TIMEOUT or `CANCELLED by 0` job line with 0:0; the signal is then taken from its batch step."""
    rows = {fields[0]: fields for fields in (line.split("|") for line in stdout.splitlines())
            if len(fields) >= 3}
    if job_id not in rows:
        return None
    state = to_job_state(rows[job_id][1], rows[job_id][2])
    batch = rows.get(f"{job_id}.batch")
    if batch and state.terminal and state.state != COMPLETED and not state.exit_code:
        return JobState(state.state, exit_code_of(batch[2]) or state.exit_code, state.reason)
    return state


def parse_scontrol(stdout: str) -> JobState | None:
    """`scontrol show job` output (`-o` one-line or multi-line) → state; None without JobState."""
    state = re.search(r"\bJobState=(\S+)", stdout)
    if not state:
        return None
    exit_code = re.search(r"\bExitCode=(\S+)", stdout)
    reason = re.search(r"\bReason=(\S+)", stdout)
    return to_job_state(state[1], exit_code[1] if exit_code else "", reason[1] if reason else "")


class SlurmScheduler(Scheduler):
    """Slurm through its command-line clients."""

    name = "slurm"
    template = "slurm.sh.j2"
    by_hand = "sbatch {run_dir}/job.sh"
    directive = "#SBATCH"
    array_index = "SLURM_ARRAY_TASK_ID"
    max_array_size = 1000        # Slurm's default MaxArraySize is 1001: indices 0..1000

    def submit(self, script: Path, run_dir: Path, after: Sequence[str] = ()) -> str:
        """`sbatch --parsable --chdir RUN_DIR [--dependency=afterany:ID:...] SCRIPT`: the job (and
        relative -o paths) run there."""
        argv = ["sbatch", "--parsable", f"--chdir={run_dir.resolve()}", *_dependency(after), str(script.resolve())]
        return submit_command(argv, "slurm", parse_sbatch)

    def submit_array(self, script: Path, out_dir: Path, count: int, after: Sequence[str] = ()) -> list[str]:
        """`sbatch --array=0-N-1 --output=OUT_DIR/array-%a.out`; task i is `ID_i`."""
        argv = ["sbatch", "--parsable", f"--chdir={out_dir.resolve()}", f"--array=0-{count - 1}",
                f"--output={out_dir.resolve() / 'array-%a.out'}", *_dependency(after), str(script.resolve())]
        job_id = submit_command(argv, "slurm", parse_sbatch)
        return [f"{job_id}_{index}" for index in range(count)]

    def state(self, job_id: str, run_dir: Path) -> JobState:
        """sacct first; scontrol when sacct is off, lagging, silent or has no signal yet (an
        ended job line can precede its batch step); then the jobcomp file."""
        acct = self._sacct(job_id, completion_file=False)
        if acct is not None and acct.terminal and (acct.state == COMPLETED or acct.exit_code):
            return acct
        live = self._scontrol(job_id)
        if live is not None and (live.terminal or acct is None or not acct.terminal):
            return live
        if acct is not None:
            return acct
        done = self._sacct(job_id, completion_file=True)
        if done is not None:
            return done
        return JobState(UNKNOWN, reason=f"job {job_id} unknown to sacct, scontrol and sacct -c")

    def cancel(self, job_id: str, run_dir: Path) -> None:
        """`scancel ID` and `cancelled=EPOCH` in the run's status file (the batch shell can
        outlive its cancelled step long enough to write DONE). A job that already ended is
        left alone and unmarked: scancel exits 0 for it (and for unknown ids), so the state
        is asked first."""
        before = self.state(job_id, run_dir)
        if before.terminal:
            return
        proc = run_command(["scancel", job_id], "slurm")
        message = (proc.stderr or proc.stdout).strip()
        if proc.returncode != 0 and not re.search(
                r"already completing or completed|invalid job id", message, re.IGNORECASE):
            raise UserError(f"scancel {job_id} failed: {message}")
        if before.state != UNKNOWN:
            with open(run_dir / "status", "a") as fh:
                fh.write(f"cancelled={int(time.time())}\n")

    @staticmethod
    def _sacct(job_id: str, completion_file: bool) -> JobState | None:
        argv = ["sacct", *(["-c"] if completion_file else []),
                "-P", "-n", "-j", job_id, "-o", "JobID,State,ExitCode"]
        proc = run_command(argv, "slurm")
        if proc.returncode != 0 or _ACCOUNTING_OFF in proc.stderr:
            return None
        return parse_sacct(proc.stdout, job_id)

    @staticmethod
    def _scontrol(job_id: str) -> JobState | None:
        proc = run_command(["scontrol", "-o", "show", "job", job_id], "slurm")
        return parse_scontrol(proc.stdout) if proc.returncode == 0 else None
