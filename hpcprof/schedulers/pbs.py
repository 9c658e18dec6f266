"""PBS: `qsub`, states from ONE `qstat -xf -F json ID...` per poll (PBS Pro, OpenPBS) or one
`qstat -f ID...` (Torque, `TorqueScheduler`), `qdel`.

Job ids are kept whole (Polaris: `308834.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov`; plain
`qstat` truncates them). Slurm's Torque wrappers (Debian `slurm-wlm-torque`) support neither
`-x` nor `-F json`, report every ended job as `job_state = C` without `exit_status`, and ignore
`#PBS -o/-e/-j` inside the script, so `-j oe -o RUN_DIR/logs/job.out` go on the command line.

Exit_status conventions differ. PBS Pro (OpenPBS src/include/job.h): 0 success, 1-255 the
script's own code (128+N: a child died of signal N), >256 the job's shell was killed by signal
X-256 (271: SIGTERM, e.g. qdel), negative: PBS itself (JOB_EXEC_*; -29 walltime, -27/-26
mem/vmem, -28 cput). Torque (Adaptive docs): negative -1..-14 (-11 walltime, -10 memory,
-12 cput), 271 for a cancelled running job.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcprof.core.errors import UserError
from hpcprof.schedulers.base import (
    CANCELLED,
    COMPLETED,
    FAILED,
    NODE_FAIL,
    OUT_OF_MEMORY,
    PENDING,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    Job,
    JobState,
    Scheduler,
    run_command,
    submit_command,
)

#: `qstat` exit codes meaning "no such job (any more)": unknown job id / finished, use -x.
QSTAT_GONE = (153, 35)
#: PBS Pro history substates (OpenPBS job.h): deleted with qdel, ended failed (an array whose
#: parent shows Exit_status 0 while a subjob failed has this one).
SUBSTATE_TERMINATED = 91
SUBSTATE_FAILED = 93

PBS_LETTERS: dict[str, str] = {
    **dict.fromkeys("QHWT", PENDING),  # queued, held, waiting, in transit
    **dict.fromkeys("REBSU", RUNNING),  # running, exiting, array begun, suspended
}

#: PBS Pro negative Exit_status (JOB_EXEC_*) by name and state; other negatives: FAILED.
PBSPRO_CODES: dict[int, tuple[str, str]] = {
    -29: (TIMEOUT, "JOB_EXEC_KILL_WALLTIME"), -28: (TIMEOUT, "JOB_EXEC_KILL_CPUT"),
    -27: (OUT_OF_MEMORY, "JOB_EXEC_KILL_MEM"), -26: (OUT_OF_MEMORY, "JOB_EXEC_KILL_VMEM"),
    -25: (FAILED, "JOB_EXEC_KILL_NCPUS_SUM"), -24: (FAILED, "JOB_EXEC_KILL_NCPUS_BURST"),
    -20: (NODE_FAIL, "JOB_EXEC_RERUN_MS_FAIL"), -14: (NODE_FAIL, "JOB_EXEC_RERUN_SIS_FAIL"),
    -4: (NODE_FAIL, "JOB_EXEC_INITABT"), -1: (FAILED, "JOB_EXEC_FAIL1"),
    -2: (FAILED, "JOB_EXEC_FAIL2"), -3: (FAILED, "JOB_EXEC_RETRY"),
}

#: Torque negative exit_status codes by name and state; other negatives: FAILED.
TORQUE_CODES: dict[int, tuple[str, str]] = {
    -11: (TIMEOUT, "JOB_EXEC_OVERLIMIT_WT"), -12: (TIMEOUT, "JOB_EXEC_OVERLIMIT_CPUT"),
    -10: (OUT_OF_MEMORY, "JOB_EXEC_OVERLIMIT_MEM"),
}


def _depend(after: Sequence[str]) -> list[str]:
    """`-W depend=afterany:...`; a subjob `7[3].server` is waited for through its array `7[].server`
    (PBS takes no dependency on a single subjob)."""
    jobs = list(dict.fromkeys(re.sub(r"\[\d+\]", "[]", job) for job in after))
    return ["-W", f"depend=afterany:{':'.join(jobs)}"] if jobs else []


def parse_qsub(stdout: str) -> str:
    """The job id `qsub` printed (the last non-empty line, kept whole)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines or not re.fullmatch(r"\d+(\[\d*\])?(\.[\w.-]+)?", lines[-1]):
        raise ValueError(f"qsub printed no job id: {stdout.strip()!r}")
    return lines[-1]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _ended(code: int | None, deleted: bool, table: dict[int, tuple[str, str]],
           detail: str) -> JobState:
    """An ended job from its exit status (None: not reported) and whether qdel ended it."""
    if code is None:
        return JobState(CANCELLED if deleted else COMPLETED, None,
                        f"{detail}; no exit status (the run's status file has it)")
    if code in table:
        state, name = table[code]
        return JobState(state, code, f"{detail}; Exit_status={code} {name}")
    if code < 0:
        return JobState(CANCELLED if deleted else FAILED, code,
                        f"{detail}; Exit_status={code} (PBS could not run the job)")
    if code > 256:
        number = code - 256
        return JobState(CANCELLED if deleted else FAILED, 128 + number,
                        f"{detail}; Exit_status={code}: killed by {_signal_name(number)}")
    if code == 0:
        return JobState(COMPLETED, 0, detail)
    return JobState(CANCELLED if deleted else FAILED, code, f"{detail}; Exit_status={code}")


def parse_qstat_json(text: str, job_id: str) -> JobState:
    """PBS Pro `qstat -xf -F json ID` → state; the job is looked up by its full id."""
    try:
        jobs: dict[str, dict[str, Any]] = json.loads(text, strict=False).get("Jobs", {})
    except json.JSONDecodeError:  # some PBS Pro releases print invalid escapes in Variable_List
        return pbspro_state(_scrape_json(text))
    return _lookup(jobs, job_id)


def parse_qstat_json_all(text: str, job_ids: Sequence[str]) -> dict[str, JobState]:
    """PBS Pro `qstat -xf -F json ID...` → state of each job asked; JSON that does not parse
    (invalid escapes in Variable_List) is read job by job."""
    try:
        jobs: dict[str, dict[str, Any]] = json.loads(text, strict=False).get("Jobs", {})
    except json.JSONDecodeError:
        parts = re.split(r'\n\s*"([^"\n]+)"\s*:\s*\{', text)
        jobs = {parts[i]: _scrape_json(parts[i + 1]) for i in range(1, len(parts) - 1, 2)}
    return {job_id: _lookup(jobs, job_id) for job_id in job_ids}


def _lookup(jobs: dict[str, dict[str, Any]], job_id: str) -> JobState:
    """One job of `qstat`'s JSON by its full id, else by its number (a short id given)."""
    job = jobs.get(job_id)
    if job is None:  # a short id given, the server answered with the long one
        job = next((v for k, v in jobs.items() if k.split(".")[0] == job_id.split(".")[0]), None)
    if job is None:
        return JobState(UNKNOWN, reason=f"job {job_id} not in qstat output")
    return pbspro_state(job)


def _scrape_json(text: str) -> dict[str, Any]:
    """The attributes `pbspro_state` needs, read from JSON that does not parse."""
    found: dict[str, Any] = {}
    for key in ("job_state", "comment"):
        match = re.search(rf'"{key}"\s*:\s*"([^"]*)"', text)
        if match:
            found[key] = match[1]
    for key in ("substate", "Exit_status"):
        match = re.search(rf'"{key}"\s*:\s*(-?\d+)', text)
        if match:
            found[key] = int(match[1])
    return found


def pbspro_state(job: dict[str, Any]) -> JobState:
    """One job's attributes from PBS Pro's JSON (job_state, substate, Exit_status, comment)."""
    letter = str(job.get("job_state", ""))
    detail = f"job_state={letter}" + (f" ({job['comment']})" if job.get("comment") else "")
    if letter in PBS_LETTERS:
        return JobState(PBS_LETTERS[letter], None, detail)
    if letter not in ("F", "X"):
        return JobState(UNKNOWN, None, detail)
    code = job.get("Exit_status")
    substate = int(job.get("substate", 0))
    ended = _ended(None if code is None else int(code), substate == SUBSTATE_TERMINATED, PBSPRO_CODES, detail)
    if ended.state == COMPLETED and substate == SUBSTATE_FAILED:
        return JobState(FAILED, ended.exit_code, f"{detail}; substate {SUBSTATE_FAILED}: failed")
    return ended


def parse_qstat_full(text: str) -> JobState:
    """Torque `qstat -f ID` text (`job_state = C`, `exit_status = N` when present) → state. The
    wrappers cannot say that a job was cancelled: the run's `cancelled=` line does (hpcprof.campaign.jobstate)."""
    attrs = dict(re.findall(r"^\s+([\w.]+) = (.*)$", text, re.MULTILINE))
    letter = attrs.get("job_state", "").strip()
    detail = f"job_state={letter}"
    if letter in PBS_LETTERS:
        return JobState(PBS_LETTERS[letter], None, detail)
    if letter != "C":
        return JobState(UNKNOWN, None, detail)
    code = attrs.get("exit_status")
    if code is not None and int(code) == 271:  # Torque: a running job cancelled with qdel
        return JobState(CANCELLED, 128 + 15, f"{detail}; exit_status=271 (qdel)")
    return _ended(None if code is None else int(code), False, TORQUE_CODES, detail)


def parse_qstat_full_all(text: str, job_ids: Sequence[str]) -> dict[str, JobState]:
    """Torque `qstat -f ID...` (one `Job Id: ID` block per job) → state of each job asked."""
    blocks = dict(re.findall(r"^Job Id:\s*(\S+)\n(.*?)(?=^Job Id:|\Z)", text, re.MULTILINE | re.DOTALL))
    found = {}
    for job_id in job_ids:
        block = blocks.get(job_id) or next((b for k, b in blocks.items() if k.split(".")[0] == job_id.split(".")[0]),
                                           None)
        found[job_id] = parse_qstat_full(block) if block is not None else JobState(
            UNKNOWN, None, f"job {job_id} unknown or finished; the run's status file decides")
    return found


class PbsScheduler(Scheduler):
    """PBS Pro / OpenPBS (`qstat -xf -F json`: finished jobs too, with their exit status)."""

    name = "pbs"
    template = "pbs.sh.j2"
    by_hand = "qsub {run_dir}/job.sh"

    directive = "#PBS"
    array_index: str | None = "PBS_ARRAY_INDEX"
    min_array_size = 2           # qsub -J 0-0 is refused
    max_array_size = 10000       # PBS Pro's default max_array_size
    #: `qstat` options asking for every job's full attributes
    qstat_options: tuple[str, ...] = ("-xf", "-F", "json")

    def submit(self, script: Path, run_dir: Path, after: Sequence[str] = ()) -> str:
        """`qsub -j oe -o RUN_DIR/logs/job.out [-W depend=afterany:ID:...] SCRIPT` (output paths
        on the command line)."""
        log = run_dir.resolve() / "logs" / "job.out"
        log.parent.mkdir(parents=True, exist_ok=True)
        return submit_command(["qsub", "-j", "oe", "-o", str(log), *_depend(after), str(script.resolve())],
                              "pbs", parse_qsub)

    def submit_array(self, script: Path, out_dir: Path, count: int, after: Sequence[str] = ()) -> list[str]:
        """`qsub -J 0-N-1`, output OUT_DIR/array.^array_index^.out; subjob i is `ID[i].server`
        (PBS arrays have at least 2 subjobs)."""
        log = out_dir.resolve() / "array.^array_index^.out"
        job_id = submit_command(["qsub", "-J", f"0-{count - 1}", "-j", "oe", "-o", str(log), *_depend(after),
                                 str(script.resolve())], "pbs", parse_qsub)
        head, _, server = job_id.partition("[]")
        return [f"{head}[{index}]{server}" for index in range(count)]

    def parse(self, text: str, job_ids: Sequence[str]) -> dict[str, JobState]:
        """The states in `qstat`'s answer for `job_ids`."""
        return parse_qstat_json_all(text, job_ids)

    def states(self, jobs: Sequence[Job]) -> dict[Job, JobState]:
        """One `qstat` for all the jobs. A failing qstat (server busy or down) gives UNKNOWN, so that
        a wait goes on polling; a job it no longer knows is left to the run's status file. qstat
        stops at the first unknown id with rc 153/35 yet prints the others: those are read."""
        ids = list(dict.fromkeys(job.id for job in jobs))
        proc = run_command(["qstat", *self.qstat_options, *ids], "pbs")
        if proc.returncode != 0 and proc.returncode not in QSTAT_GONE:
            failed = JobState(UNKNOWN, None, f"qstat rc {proc.returncode} (polling goes on): "
                                             f"{(proc.stderr or proc.stdout).strip()[:200]}")
            return dict.fromkeys(jobs, failed)
        found = self.parse(proc.stdout, ids) if proc.stdout.strip() else {}
        gone = JobState(UNKNOWN, None, f"qstat rc {proc.returncode}: job unknown or finished; the run's status "
                                       "file decides")
        states = {}
        for job in jobs:
            state = found.get(job.id)
            states[job] = state if state is not None and (state.state != UNKNOWN or proc.returncode == 0) else gone
        return states

    def cancel(self, job_id: str, run_dir: Path) -> bool:
        """`qdel ID`; a job that already ended is not an error (False)."""
        proc = run_command(["qdel", job_id], "pbs")
        if proc.returncode == 0:
            return True
        message = (proc.stderr or proc.stdout).strip()
        ended = proc.returncode in QSTAT_GONE or not message or re.search(
            r"unknown job|has finished|invalid state|already", message, re.IGNORECASE)
        if not ended:
            raise UserError(f"qdel {job_id} failed: {message}")
        return False


class TorqueScheduler(PbsScheduler):
    """Torque, and Slurm's Torque wrappers (`qstat -f`: text, no `-x`, no exit status for `C`;
    `#PBS -l nodes=N:ppn=M`). No job arrays: Torque's `-t`/PBS_ARRAYID and the wrappers' task ids
    differ from PBS Pro's, and neither is tested here."""

    name = "torque"
    template = "torque.sh.j2"
    array_index = None
    qstat_options = ("-f",)

    def parse(self, text: str, job_ids: Sequence[str]) -> dict[str, JobState]:
        return parse_qstat_full_all(text, job_ids)
