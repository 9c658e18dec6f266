"""A run's state, decided in one place: the job's own status file first, the scheduler second.

`current_states` asks each scheduler ONCE for all the runs of a poll (`Scheduler.states`), and only
for runs their files cannot settle (no DONE, no final state stored). `recorded_state` never asks a
scheduler (`report`, `compare`). `record`, `refresh`, `wait` and `cancel` keep the store in step.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpcprof.config.directives import walltime_seconds
from hpcprof.core.errors import UserError
from hpcprof.run.rundir import RunDir
from hpcprof.schedulers import get_scheduler
from hpcprof.schedulers.base import CANCELLED, COMPLETED, FAILED, RUNNING, TIMEOUT, UNKNOWN, Job, JobState

if TYPE_CHECKING:
    from hpcprof.campaign.store import Store

#: A TERM this close to the walltime (seconds) is the walltime's.
WALLTIME_SLACK = 5
#: srun's line for the first task that failed (with --kill-on-bad-exit it then stops the others)
SRUN_TASK_EXIT = re.compile(r"srun: error: \S+: tasks? ([0-9,\-]+): Exited with exit code (\d+)")
NOT_SUBMITTED = JobState("NOT_SUBMITTED")


def _first_failed_task(run: RunDir) -> str:
    """"; rank R exited with code C first" where srun's job log names the task that failed."""
    match = SRUN_TASK_EXIT.search(run.log_tail())
    return f"; rank {match[1]} exited with code {match[2]} first (srun stopped the others)" if match else ""


def _walltime_reached(run: RunDir, status: dict[str, str]) -> bool:
    """Whether the job's TERM trap ran at its walltime (start/end from the status file)."""
    try:
        elapsed = int(status["end"]) - int(status["start"])
    except (KeyError, ValueError):
        return False
    from hpcprof.run.record import read_record

    try:
        return elapsed >= walltime_seconds(read_record(run).walltime) - WALLTIME_SLACK
    except (ValueError, UserError):         # a bad walltime; a damaged config.json
        return False


def reconcile(run: RunDir, scheduler_view: JobState | None) -> JobState:
    """The run's state: the job's own status file first, the scheduler's view second. A job that
    wrote DONE keeps the exit code it wrote (a later cancel does not rewrite it); a job whose
    TERM trap ran (no DONE) was cancelled by hpcprof, or else reached its walltime. DONE is looked
    at before the status file is read: the job writes its exit code, then DONE, so a job that ends
    between the two looks is still running here, never DONE without its exit code."""
    done = run.done
    status = run.job_status()
    code = int(status["exit_code"]) if re.fullmatch(r"-?\d{1,9}", status.get("exit_code", "")) else None
    if status.get("cancelled") and code != 0:  # marked only while running: see `cancel`
        return JobState(CANCELLED, code, "cancelled by hpcprof")
    if done and code is not None:
        return JobState(COMPLETED if code == 0 else FAILED, code, "" if code == 0 else status.get(
            "check") or f"exit code {code}{_first_failed_task(run)}")  # check: a failed job-start check
    if done:  # the job ended (DONE is written last) but its exit code cannot be read
        shown = status.get("damaged") or (f"{run.path / 'status'}: exit_code={status['exit_code'][:40]!r} is "
                                          "not a number" if "exit_code" in status else
                                          f"{run.path / 'status'}: no exit_code")
        return JobState(FAILED, None, f"ended, exit code unknown ({shown})")
    if "damaged" in status:
        return JobState(UNKNOWN, None, status["damaged"])
    if status.get("signal") and _walltime_reached(run, status):
        return JobState(TIMEOUT, None, "killed at its walltime (job's TERM trap)")
    if scheduler_view is not None and scheduler_view.state != UNKNOWN:
        if scheduler_view.state == COMPLETED and not done and status.get("start"):
            return JobState(FAILED, scheduler_view.exit_code, "job ended without writing DONE")
        return scheduler_view
    if status.get("start"):
        return JobState(RUNNING if scheduler_view is None else UNKNOWN, None, "started, no DONE yet")
    return scheduler_view or JobState(UNKNOWN)


def _note(state: JobState) -> str:
    return f"{state.state} {state.exit_code}"


def stored_view(run: RunDir) -> JobState | None:
    """The final state `record` noted in the run directory (the store holds it), or None."""
    raw = run.stored_state()
    if raw is None:
        return None
    head, _, reason = raw.decode(errors="replace").partition("\n")
    state, _, code = head.partition(" ")
    exit_code = int(code) if re.fullmatch(r"-?\d{1,9}", code) else None
    view = JobState(state, exit_code, reason)
    return view if view.terminal else None


def terminal_state_stored(run: RunDir, state: JobState) -> bool:
    """Whether `state` is terminal and the store already holds it; a damaged note is as good as none."""
    raw = run.stored_state()
    return state.terminal and raw is not None and raw.split(b"\n")[0] == _note(state).encode()


def current_states(runs: Sequence[RunDir]) -> dict[RunDir, JobState]:
    """Every run's state; the runs their files cannot settle are asked of their scheduler in ONE
    `states` call per scheduler (a missing client: UNKNOWN naming it, e.g. a run copied off the
    cluster)."""
    found: dict[RunDir, JobState] = {}
    asked: dict[str, dict[Job, RunDir]] = {}
    for run in runs:
        sub = run.submission
        if not sub:
            found[run] = reconcile(run, None) if started_by_hand(run) else NOT_SUBMITTED
        elif "error" in sub:
            found[run] = JobState(UNKNOWN, None, sub["error"])
        elif run.done:
            found[run] = reconcile(run, None)
        elif (stored := stored_view(run)) is not None:  # final, and the store has it: no need to ask
            found[run] = reconcile(run, stored)
        else:
            asked.setdefault(sub["scheduler"], {})[Job(sub["job_id"], run.path)] = run
    for name, jobs in asked.items():
        try:
            views = get_scheduler(name).states(list(jobs))
        except UserError as exc:
            views = dict.fromkeys(jobs, JobState(UNKNOWN, None, exc.format_message()))
        found.update({run: reconcile(run, views[job]) for job, run in jobs.items()})
    return {run: found[run] for run in runs}


def current_state(run: RunDir) -> JobState:
    """One run's state (`current_states` of one)."""
    return current_states([run])[run]


def recorded_state(run: RunDir) -> JobState:
    """The run's state from its files alone (status file, DONE, the final state stored): no
    scheduler is asked, so `report` and `compare` stay read-only and work off the cluster."""
    if not run.submission:
        return reconcile(run, None) if started_by_hand(run) else NOT_SUBMITTED
    return reconcile(run, stored_view(run))


def started_by_hand(run: RunDir) -> bool:
    """Whether a run hpcprof did not submit (`render -o`, then its job.sh run by hand) was started:
    its job wrote its start or DONE, so its own status file tells its state."""
    return run.done or bool(run.job_status().get("start"))


def unrecorded(states: dict[RunDir, JobState]) -> dict[RunDir, JobState]:
    """The states `record` has to store: all but the terminal ones the store already holds."""
    return {run: state for run, state in states.items() if not terminal_state_stored(run, state)}


def record(states: dict[RunDir, JobState], store: Store | None) -> None:
    """Store each run's state if it changed, in one transaction. A terminal state is final: once
    stored, the run directory says so, and later looks need not open the store nor ask the
    scheduler (`status` stays fast)."""
    todo = unrecorded(states)
    if store is None or not todo:
        return
    known = store.record_states({run.run_id: (s.state, s.exit_code, s.reason) for run, s in todo.items()})
    for run, state in todo.items():
        if state.terminal and run.run_id in known:
            run.store_state(f"{_note(state)}\n{state.reason}")


def refresh(run: RunDir, store: Store | None) -> JobState:
    """Look the state up and store it if it changed (a None store: read-only, no store)."""
    state = current_state(run)
    record({run: state}, store)
    return state


#: how often `wait` looks for a DONE file between its scheduler queries (seconds)
DONE_LOOK_S = 0.25


def wait(runs: Sequence[RunDir], store: Store, timeout: float | None = None) -> dict[RunDir, JobState]:
    """Poll until every run is terminal (one scheduler query per poll for those still going),
    backing off from 0.5 s to 10 s; a run's DONE file, looked for every DONE_LOOK_S, ends the
    pause at once (its own files settle its state)."""
    delay, start = 0.5, time.monotonic()
    final: dict[RunDir, JobState] = {}
    while True:
        going = [run for run in runs if run not in final]
        states = current_states(going)
        record(states, store)
        final.update({run: state for run, state in states.items() if state.terminal})
        if len(final) == len(set(runs)) or (timeout is not None and time.monotonic() - start > timeout):
            return {run: final.get(run) or states[run] for run in runs}
        pause_until_done([run for run in going if run not in final], delay)
        delay = min(delay * 1.5, 10.0)


def pause_until_done(runs: Sequence[RunDir], seconds: float) -> None:
    """Sleep `seconds`, or less: until one of `runs` has its DONE file."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0 and not any(run.done for run in runs):
        time.sleep(min(DONE_LOOK_S, left))


def cancel(run: RunDir, store: Store | None) -> JobState:
    """Cancel the run's job, mark the run cancelled when a live job was stopped, and record the
    result; a run already ended keeps its state."""
    sub = run.submission
    if "error" in sub:
        raise UserError(f"{sub['error']}: the job to cancel is unknown; cancel it with the scheduler's own "
                        "command (scancel, qdel)")
    before = current_state(run)
    if before.terminal:
        return before
    if sub and get_scheduler(sub["scheduler"]).cancel(sub["job_id"], run.path):
        run.mark_cancelled()
    return refresh(run, store)
