"""Slurm: `sbatch --parsable`, states from ONE `sacct -P` for all the jobs of a poll (or one
`scontrol show job` / `sacct -c` without accounting storage), `scancel`.

Sources, most specific first, each asked once per poll and only for the jobs the one before
could not settle: `sacct` (slurmdbd; it lags the job end by a few seconds, which the next poll
sees), `scontrol -o show job` (every job the controller holds: pending, running and those ended
less than MinJobAge ago; its ExitCode has the signal, e.g. 0:15 for TIMEOUT), and the
job-completion file through `sacct -c` (jobcomp/filetxt; logs TIMEOUT with ExitCode 0:0).
Where slurm.conf is readable and says `AccountingStorageType=accounting_storage/none`, `sacct`
is not asked at all (it would only answer "accounting storage is disabled").
`squeue` adds nothing to `scontrol` here (same daemon, fewer fields) and is not asked.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from hpcprof.core.errors import UserError
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
    Job,
    JobState,
    Scheduler,
    run_command,
    submit_command,
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


def array_ids(job_id: str) -> list[str]:
    """The task ids a (possibly collapsed) id names: `7_[2-4,9%2]` -> 7_2, 7_3, 7_4, 7_9; others as is."""
    match = re.fullmatch(r"(\d+)_\[([0-9,\-]+)(?:%\d+)?\]", job_id)
    if not match:
        return [job_id]
    ids = []
    for part in match[2].split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            ids += [f"{match[1]}_{task}" for task in range(int(first), int(last or first) + 1)]
    return ids


def sacct_rows(stdout: str) -> dict[str, list[str]]:
    """`sacct -P -n -o JobID,State,ExitCode` lines by job id (collapsed pending array tasks expanded)."""
    rows: dict[str, list[str]] = {}
    for fields in (line.split("|") for line in stdout.splitlines()):
        if len(fields) >= 3:
            rows.update(dict.fromkeys(array_ids(fields[0]), fields))
    return rows


def parse_sacct(stdout: str, job_id: str, rows: dict[str, list[str]] | None = None) -> JobState | None:
    """The job's own line in `sacct -P -n -o JobID,State,ExitCode` (`rows`: those lines already
    split by `sacct_rows`), or None. slurmdbd logs a TIMEOUT or `CANCELLED by 0` job line with 0:0;
    the signal is then taken from its batch step."""
    rows = sacct_rows(stdout) if rows is None else rows
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


def parse_scontrol_all(stdout: str) -> dict[str, JobState]:
    """`scontrol -o show job` (every job, one per line) -> state by job id; an array task is also
    known as `ARRAYID_TASK` (a pending range `ArrayTaskId=5-9` names each of its tasks)."""
    found: dict[str, JobState] = {}
    for line in stdout.splitlines():
        job = re.search(r"\bJobId=(\d+)", line)
        state = parse_scontrol(line)
        if not job or state is None:
            continue
        found[job[1]] = state
        array = re.search(r"\bArrayJobId=(\d+) ArrayTaskId=(\S+)", line)
        if array:
            found.update(dict.fromkeys(array_ids(f"{array[1]}_[{array[2]}]"), state))
    return found


def accounting_disabled(conf: Path | None = None) -> bool:
    """Whether slurm.conf ($SLURM_CONF, else /etc/slurm/slurm.conf) is readable here and sets no
    accounting storage (so `sacct` can only fail); False where it cannot be read (configless)."""
    path = conf or Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    setting = re.search(r"^\s*AccountingStorageType\s*=\s*(\S+)", text, re.MULTILINE | re.IGNORECASE)
    return setting is None or setting[1].endswith("/none")


def _settled(state: JobState | None) -> bool:
    """Whether a `sacct` answer needs no other source: live, or ended with its exit code known."""
    return state is not None and (not state.terminal or state.state == COMPLETED or bool(state.exit_code))


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

    def states(self, jobs: Sequence[Job]) -> dict[Job, JobState]:
        """One `sacct` for all the jobs; one `scontrol -o show job` for those it could not settle
        (accounting off, not logged yet, or ended with no signal yet: an ended job line can precede
        its batch step); one `sacct -c` (the jobcomp file) for those the controller forgot."""
        ids = list(dict.fromkeys(job.id for job in jobs))
        acct = {} if accounting_disabled() else self._sacct(ids, completion_file=False)
        found = {job_id: acct[job_id] for job_id in ids if _settled(acct.get(job_id))}
        lacking = [job_id for job_id in ids if job_id not in found]
        if lacking:
            live = self._scontrol_all()
            for job_id in lacking:
                view, logged = live.get(job_id), acct.get(job_id)
                if view is not None and (view.terminal or logged is None):
                    found[job_id] = view
                elif logged is not None:
                    found[job_id] = logged
        forgotten = [job_id for job_id in ids if job_id not in found]
        if forgotten:
            found.update(self._sacct(forgotten, completion_file=True))
        unknown = JobState(UNKNOWN, reason="unknown to sacct, scontrol and sacct -c")
        return {job: found.get(job.id, unknown) for job in jobs}

    def cancel(self, job_id: str, run_dir: Path) -> bool:
        """`scancel ID`. A job that already ended is left alone: scancel exits 0 for it (and for
        unknown ids), so the state is asked first."""
        before = self.state(job_id, run_dir)
        if before.terminal:
            return False
        proc = run_command(["scancel", job_id], "slurm")
        message = (proc.stderr or proc.stdout).strip()
        if proc.returncode != 0 and not re.search(
                r"already completing or completed|invalid job id", message, re.IGNORECASE):
            raise UserError(f"scancel {job_id} failed: {message}")
        return before.state != UNKNOWN

    @staticmethod
    def _sacct(job_ids: list[str], completion_file: bool) -> dict[str, JobState]:
        """The jobs `sacct [-c]` knows, asked once (an array task through its array's id)."""
        asked = ",".join(dict.fromkeys(job_id.split("_")[0] for job_id in job_ids))
        argv = ["sacct", *(["-c"] if completion_file else []), "-P", "-n", "-j", asked, "-o", "JobID,State,ExitCode"]
        proc = run_command(argv, "slurm")
        if proc.returncode != 0 or _ACCOUNTING_OFF in proc.stderr:
            return {}
        rows = sacct_rows(proc.stdout)
        found = {job_id: parse_sacct("", job_id, rows) for job_id in job_ids}
        return {job_id: state for job_id, state in found.items() if state is not None}

    @staticmethod
    def _scontrol_all() -> dict[str, JobState]:
        proc = run_command(["scontrol", "-o", "show", "job"], "slurm")
        return parse_scontrol_all(proc.stdout) if proc.returncode == 0 else {}
