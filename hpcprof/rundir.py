"""The run directory `<workdir>/<experiment>/<run-id>/` and the status the job writes there.

Layout: config.json (resolved), job.sh, rank_wrapper.sh, logs/, profiles/<tool>/, results/,
tmp/, derived/ (collect's own intermediate files, e.g. exported .sqlite), `status` (key=value lines written by the job: start, host, job_id, exit_code, end),
`DONE` (written last by the job), `submission.json` (written at submit: scheduler, job id).
"""

from __future__ import annotations

import glob
import json
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcprof.atomic import atomic_write
from hpcprof.errors import UserError, warn
from hpcprof.config.directives import walltime_seconds
from hpcprof.schedulers.base import CANCELLED, COMPLETED, FAILED, RUNNING, TIMEOUT, UNKNOWN, JobState

#: A run id as new_run_id makes them (and as `status RUN` accepts them): no glob characters.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
#: A TERM this close to the walltime (seconds) is the walltime's.
WALLTIME_SLACK = 5
#: srun's line for the first task that failed (with --kill-on-bad-exit it then stops the others)
SRUN_TASK_EXIT = re.compile(r"srun: error: \S+: tasks? ([0-9,\-]+): Exited with exit code (\d+)")
#: how much of the end of the job log is searched for it
LOG_TAIL_BYTES = 1 << 16


def new_run_id(index: int | None = None) -> str:
    """A run id fixed once at submit: time stamp + random suffix (+ sweep point)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suffix = secrets.token_hex(3)
    return f"{stamp}-{suffix}" if index is None else f"{stamp}-{suffix}-p{index:03d}"


class DamagedRunFile(UserError):
    """A run file hpcprof wrote that cannot be read back (config.json): one line naming it."""


def config_problem(data: Any) -> str | None:
    """What is wrong with a loaded config.json, or None: the keys every reader uses."""
    if not isinstance(data, dict):
        return "not a JSON object"
    experiment = data.get("experiment")
    if not isinstance(experiment, dict) or not isinstance(experiment.get("name"), str):
        return "no experiment.name"
    for part, key in (("workload", "kind"), ("profile", "tool")):
        if not isinstance(experiment.get(part), dict) or not isinstance(experiment[part].get(key), str):
            return f"no experiment.{part}.{key}"
    if not isinstance(data.get("site"), dict):
        return "no site"
    if not isinstance(data.get("sweep_point"), dict):
        return "no sweep_point"
    return None


@dataclass(frozen=True)
class RunDir:
    """One run's directory."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def config(self) -> dict[str, Any]:
        """The resolved config; DamagedRunFile (one line naming the file) when it cannot be read."""
        path = self.path / "config.json"
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0][:120]
            raise DamagedRunFile(f"{path}: damaged run file ({reason}); this run cannot be read "
                                 "(move its directory away, or resubmit the experiment)") from None
        if (problem := config_problem(data)) is not None:
            raise DamagedRunFile(f"{path}: damaged run file ({problem}); this run cannot be read "
                                 "(move its directory away, or resubmit the experiment)")
        return data

    def damage(self) -> str | None:
        """The one line naming the run's damaged config.json, or None when it reads."""
        try:
            _ = self.config
        except DamagedRunFile as exc:
            return exc.format_message()
        return None

    @property
    def submission(self) -> dict[str, Any]:
        """What submit recorded; {} before submit; {"error": ...} when the file is damaged."""
        path = self.path / "submission.json"
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and isinstance(data.get("job_id"), str) and isinstance(data.get("scheduler"), str):
                return data
        except (OSError, ValueError):
            pass
        return {"error": f"{path} is damaged (not the JSON submit wrote)"}

    def record_submission(self, scheduler: str, job_id: str) -> None:
        data = {"scheduler": scheduler, "job_id": job_id, "submitted_at": time.time()}
        atomic_write(self.path / "submission.json", json.dumps(data, indent=1))

    def job_status(self) -> dict[str, str]:
        """The key=value lines the job wrote (last value of a key wins); a line that is not
        UTF-8 text is kept as `damaged` (the first one), see `state`."""
        path = self.path / "status"
        try:
            raw = path.read_bytes()
        except OSError:
            return {}
        status: dict[str, str] = {}
        for number, line in enumerate(raw.splitlines(), 1):
            try:
                key, sep, value = line.decode("utf-8").partition("=")
            except UnicodeDecodeError:
                status.setdefault("damaged", f"{path}: line {number} is not UTF-8 text")
                continue
            if sep:
                status[key] = value
        return status

    def terminal_state_stored(self, state: JobState) -> bool:
        """Whether `state` is terminal and the store already holds it (see `mark_terminal_state_stored`);
        a damaged note is as good as none (it is written again)."""
        path = self.path / "state.stored"
        try:
            return state.terminal and path.read_bytes() == f"{state.state} {state.exit_code}".encode()
        except OSError:
            return False

    def mark_terminal_state_stored(self, state: JobState) -> None:
        """Note that the store holds this final state."""
        atomic_write(self.path / "state.stored", f"{state.state} {state.exit_code}")

    @property
    def done(self) -> bool:
        return (self.path / "DONE").exists()

    def _first_failed_task(self) -> str:
        """"; rank R exited with code C first" where srun's job log names the task that failed."""
        try:
            with open(self.path / "logs" / "job.out", "rb") as log:
                log.seek(max(0, log.seek(0, 2) - LOG_TAIL_BYTES))
                match = SRUN_TASK_EXIT.search(log.read().decode(errors="replace"))
        except OSError:
            return ""
        return f"; rank {match[1]} exited with code {match[2]} first (srun stopped the others)" if match else ""

    def _walltime_reached(self, status: dict[str, str]) -> bool:
        """Whether the job's TERM trap ran at its walltime (start/end from the status file)."""
        try:
            elapsed = int(status["end"]) - int(status["start"])
            return elapsed >= walltime_seconds(str(self.config["walltime"])) - WALLTIME_SLACK
        except (KeyError, ValueError, TypeError, OSError, UserError):
            return False

    def state(self, scheduler_view: JobState | None) -> JobState:
        """The run's state: the job's own status file first, the scheduler second. A job that
        wrote DONE keeps the exit code it wrote (a later cancel does not rewrite it); a job whose
        TERM trap ran (no DONE) was cancelled by hpcprof, or else reached its walltime."""
        status = self.job_status()
        code = int(status["exit_code"]) if re.fullmatch(r"-?\d{1,9}", status.get("exit_code", "")) else None
        if status.get("cancelled") and code != 0:  # marked only while running: see campaign.cancel
            return JobState(CANCELLED, code, "cancelled by hpcprof")
        if self.done and code is not None:
            return JobState(COMPLETED if code == 0 else FAILED, code, "" if code == 0 else status.get(
                "check") or f"exit code {code}{self._first_failed_task()}")  # check: a failed job-start check
        if self.done:  # the job ended (DONE is written last) but its exit code cannot be read
            shown = status.get("damaged") or (f"{self.path / 'status'}: exit_code={status['exit_code'][:40]!r} is "
                                              "not a number" if "exit_code" in status else
                                              f"{self.path / 'status'}: no exit_code")
            return JobState(FAILED, None, f"ended, exit code unknown ({shown})")
        if "damaged" in status:
            return JobState(UNKNOWN, None, status["damaged"])
        if status.get("signal") and self._walltime_reached(status):
            return JobState(TIMEOUT, None, "killed at its walltime (job's TERM trap)")
        if scheduler_view is not None and scheduler_view.state != UNKNOWN:
            if scheduler_view.state == COMPLETED and not self.done and status.get("start"):
                return JobState(FAILED, scheduler_view.exit_code, "job ended without writing DONE")
            return scheduler_view
        if status.get("start"):
            return JobState(RUNNING if scheduler_view is None else UNKNOWN, None, "started, no DONE yet")
        return scheduler_view or JobState(UNKNOWN)


def find_run(ref: str, workdir: Path) -> RunDir:
    """A run named by its path or by its id (searched under `workdir`)."""
    path = Path(ref)
    if (path / "config.json").is_file():
        return RunDir(path.resolve())
    if not RUN_ID.fullmatch(ref):
        raise UserError(f"run {ref!r}: not a run id (letters, digits and _.- only) nor a run directory")
    matches = [Path(p).parent for p in glob.glob(f"{glob.escape(str(workdir))}/*/{ref}/config.json")]
    if len(matches) == 1:
        return RunDir(matches[0].resolve())
    if not matches:
        raise UserError(f"run {ref!r}: no such run directory or run id under {workdir}")
    raise UserError(f"run {ref!r}: ambiguous, matches {', '.join(str(m) for m in matches)}")


def sweep_of(run_id: str) -> str:
    """The sweep id of a run id (`<sweep>-p003` -> `<sweep>`; a single-point run is its sweep)."""
    head, sep, tail = run_id.rpartition("-p")
    return head if sep and tail.isdigit() else run_id


def readable(runs: list[RunDir]) -> list[RunDir]:
    """The runs whose config.json reads; each damaged one is named in a warning and left out,
    so one damaged run never hides the others."""
    kept = []
    for run in runs:
        if (problem := run.damage()) is None:
            kept.append(run)
        else:
            warn(f"{problem}; skipped")
    return kept


def all_runs(workdir: Path, damaged: bool = False) -> list[RunDir]:
    """Every run under `workdir`, oldest first; those with a damaged config.json only with
    `damaged` (else each is named in a warning)."""
    runs = [RunDir(p.parent.resolve()) for p in sorted(workdir.glob("*/*/config.json"), key=lambda p: p.parent.name)]
    return runs if damaged else readable(runs)


def select_runs(refs: tuple[str, ...] | list[str], workdir: Path) -> list[RunDir]:
    """Runs named by run id, run directory or sweep id (all its points), each once, in order;
    those with a damaged config.json are named in a warning and left out (all of them
    damaged: a one-line error naming the first)."""
    runs = all_runs(workdir, damaged=True) if workdir.is_dir() else []
    selected: list[RunDir] = []
    for ref in refs:
        points = [r for r in runs if r.run_id == ref or r.run_id.startswith(ref + "-p")]
        if not points:
            points = [find_run(ref, workdir)]
        selected += [p for p in points if p not in selected]
    if selected and all(run.damage() for run in selected):
        raise DamagedRunFile(str(selected[0].damage()))
    return readable(selected)
