"""The one interface every scheduler module implements: submit, states (batched), cancel, and
what a scheduler adds to a run (`extra_files`) or does while a run goes on (`follow`).

Rendering is shared (hpcprof.render picks the scheduler's template by `Scheduler.template`).
A run's state is decided by `hpcprof.campaign.jobstate` (the job's own status file first, the
scheduler's view second); schedulers never read or write a run directory's state files.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hpcprof.core.errors import UserError

if TYPE_CHECKING:
    import subprocess

#: Normalised job states. Terminal ones end a wait.
PENDING, RUNNING, COMPLETED, FAILED = "PENDING", "RUNNING", "COMPLETED", "FAILED"
CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY = "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"
PREEMPTED, UNKNOWN = "PREEMPTED", "UNKNOWN"
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED})


class JobState(NamedTuple):
    """A job as the scheduler sees it."""

    state: str                   # one of the constants above
    exit_code: int | None = None
    reason: str = ""             # scheduler's words (e.g. "CANCELLED by 0", "DUE TO TIME LIMIT")

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


class Job(NamedTuple):
    """One submitted job: its scheduler id and the run directory it runs in."""

    id: str
    run_dir: Path


class Scheduler(ABC):
    """A batch system (or the local machine) behind one interface."""

    name: str
    template: str  # the job-script template this scheduler uses, e.g. "pbs.sh.j2"
    #: the command a user submits a rendered run with, e.g. "sbatch {run_dir}/job.sh"
    by_hand: str = "bash {run_dir}/job.sh"
    #: the batch directive prefix ("#SBATCH", "#PBS"); None: no batch script (no arrays)
    directive: str | None = None
    #: the variable holding a task's index in an array job
    array_index: str | None = None
    #: whether the scheduler's own workers are the containers (Kubernetes pods): no `container:`
    #: wrapping and no job-start checks on a host of ours
    runs_containers: bool = False
    #: the smallest and (by default: a site's max_array_size overrides it) largest array it accepts
    min_array_size: int = 1
    max_array_size: int = 0

    @abstractmethod
    def submit(self, script: Path, run_dir: Path, after: Sequence[str] = ()) -> str:
        """Submit the rendered job script, to start once the jobs `after` ended (any state);
        returns the job id."""

    def submit_array(self, script: Path, out_dir: Path, count: int, after: Sequence[str] = ()) -> list[str]:
        """Submit `script` as an array of `count` tasks (indices 0..count-1), their scheduler
        output under `out_dir`; returns the job id of each task."""
        raise UserError(f"{self.name} runs no job arrays; submit without --array, or use a slurm or pbs site")

    @abstractmethod
    def states(self, jobs: Sequence[Job]) -> dict[Job, JobState]:
        """The scheduler's view of every job in `jobs`, asked in one query where the batch system
        allows it (one `sacct`, one `qstat`): status of 1,000 runs is one poll, not 1,000."""

    def state(self, job_id: str, run_dir: Path) -> JobState:
        """The scheduler's view of one job (`states` of one)."""
        job = Job(job_id, run_dir)
        return self.states([job])[job]

    @abstractmethod
    def cancel(self, job_id: str, run_dir: Path) -> bool:
        """Cancel the job; True when a live job was asked to stop (the caller then marks the run
        cancelled), False when it had already ended or is unknown (no error)."""

    def extra_files(self, env: Any, context: dict[str, Any], site: Any, run_dir: Path) -> dict[str, str]:
        """Files this scheduler adds to a run directory besides job.sh and rank_wrapper.sh (name ->
        content), rendered with the Jinja `env` from the job templates' `context`; none by default."""
        return {}

    def start_dir(self, site: Any, submit_dir: Path | None, run_dir: Path) -> Path | None:
        """Where the ranks start: the submit directory by default."""
        return submit_dir

    def follow(self, job_id: str, run_dir: Path) -> None:
        """Stay with a just-submitted job until it ends, showing its output (`submit --wait` of a
        local run); batch schedulers return at once and are polled instead."""
        return None


def no_dependencies(scheduler: str, after: Sequence[str]) -> None:
    """Schedulers that start jobs at once cannot wait for others."""
    if after:
        raise UserError(f"--after: the {scheduler} scheduler starts jobs at once and cannot make one wait "
                        "for another; submit when they have ended, or use a slurm or pbs site")


def run_command(argv: list[str], what: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a scheduler client command; a missing client is a user error naming it."""
    import subprocess  # here: `render` and `status` of stored runs start no command

    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise UserError(f"{what}: command {argv[0]!r} not found; is this a {what} host?") from exc


def submit_command(argv: list[str], what: str, parse: Callable[[str], str]) -> str:
    """Run a submit command (`sbatch`, `qsub`) and parse the job id from its output; a rejected
    submission or unreadable answer is a user error quoting the scheduler's words."""
    proc = run_command(argv, what)
    if proc.returncode != 0:
        raise UserError(f"{argv[0]} rejected {argv[-1]}: {(proc.stderr or proc.stdout).strip()}")
    try:
        return parse(proc.stdout)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
