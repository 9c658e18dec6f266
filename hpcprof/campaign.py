"""Plan, submit, watch and cancel runs: config -> render -> scheduler, recorded in the store."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprof.config import MAX_POINTS
from hpcprof.errors import UserError
from hpcprof.rundir import RunDir, new_run_id
from hpcprof.schedulers import get_scheduler
from hpcprof.schedulers.base import UNKNOWN, JobState
from hpcprof.schedulers.local import LocalScheduler

if TYPE_CHECKING:  # plan/write import the models and the renderer when they run: status stays light
    from hpcprof.config.site import SiteConfig
    from hpcprof.render.job import RenderedRun
    from hpcprof.store import Store


@dataclass
class Plan:
    """Every run of one submit, rendered in memory and validated."""

    sweep_id: str
    experiment: str
    site: SiteConfig
    spec: dict
    runs: list[RenderedRun]


def plan(experiment_file: Path, site: SiteConfig, overrides: list[str], workdir: Path,
         templates: Path | None = None, max_points: int = MAX_POINTS, out_dir: Path | None = None) -> Plan:
    """Validate the experiment on `site`, expand the sweep and render every point (no writes);
    each rendered job script's directives are parsed back and checked against the site limits.
    Run directories are WORKDIR/EXPERIMENT/RUN_ID, or with `out_dir` (`render -o`) OUT_DIR itself
    (one point) or OUT_DIR/pNNN."""
    from hpcprof.config.directives import check_rendered
    from hpcprof.config.experiment import expand, load_experiment
    from hpcprof.render.job import render_point, template_dirs

    data = load_experiment(experiment_file, overrides)
    points = expand(data, site, f"experiment {experiment_file}", max_points)
    dirs = template_dirs(site, templates)
    sweep_id = new_run_id()
    name = points[0].experiment.name
    runs = []
    for point in points:
        run_id = sweep_id if len(points) == 1 else f"{sweep_id}-p{point.index:03d}"
        if out_dir is None:
            run_dir = (workdir / name / run_id).resolve()
        else:
            run_dir = (out_dir if len(points) == 1 else out_dir / f"p{point.index:03d}").resolve()
        rendered = render_point(point, site, run_dir, run_id, dirs, submit_dir=Path.cwd())
        check_rendered(site.scheduler, rendered.files["job.sh"], site.defaults.max_walltime,
                       site.node.max_nodes, f"experiment {experiment_file} point {point.index}")
        runs.append(rendered)
    return Plan(sweep_id, name, site, points[0].experiment.sweep, runs)


def write(plan_: Plan, store: Store) -> list[RunDir]:
    """Write every run directory and record the sweep in the store; if either fails, the run
    directories written so far are removed (nothing the store does not know is left)."""
    from hpcprof.render.job import write_run

    run_dirs: list[RunDir] = []
    try:
        for r in plan_.runs:
            run_dirs.append(RunDir(write_run(r)))
        store.add_sweep(plan_.sweep_id, plan_.experiment, plan_.site.name, plan_.spec, [
            {"run_id": r.run_id, "point_index": r.point.index, "params": r.point.params,
             "experiment": plan_.experiment, "site": plan_.site.name, "run_dir": str(r.run_dir),
             "world_size": r.point.world_size, "profile_tool": r.point.experiment.profile.tool}
            for r in plan_.runs])
    except BaseException:
        for run in run_dirs:
            shutil.rmtree(run.path, ignore_errors=True)
        raise
    return run_dirs


def submit(run: RunDir, site: SiteConfig, store: Store, foreground: bool = False) -> str:
    """Hand one run to its scheduler (local runs may run in the foreground)."""
    scheduler = get_scheduler(site.scheduler)
    job_id = scheduler.submit(run.path / "job.sh", run.path)
    run.record_submission(scheduler.name, job_id)
    store.add_job(run.run_id, job_id, scheduler.name)
    try:
        if foreground and isinstance(scheduler, LocalScheduler):
            scheduler.follow(job_id, run.path)
    finally:
        refresh(run, store)
    return job_id


def current_state(run: RunDir) -> JobState:
    """The run's state: its own status file first, then its scheduler (if its client is here)."""
    sub = run.submission
    if not sub:
        return JobState("NOT_SUBMITTED")
    if "error" in sub:
        return JobState(UNKNOWN, None, sub["error"])
    if run.done:
        return run.state(None)
    try:
        view = get_scheduler(sub["scheduler"]).state(sub["job_id"], run.path)
    except UserError as exc:  # e.g. a run copied off the cluster: no qstat/sacct here
        view = JobState(UNKNOWN, None, exc.format_message())
    return run.state(view)


def refresh(run: RunDir, store: Store | None) -> JobState:
    """Look the state up and store it if it changed (a None store: read-only, no store)."""
    state = current_state(run)
    record(run, state, store)
    return state


def record(run: RunDir, state: JobState, store: Store | None) -> None:
    """Store `state` if it changed. A terminal state is final: once stored, the run directory
    says so, and later looks need not open the store (`hpcprof status` stays fast)."""
    if store is None or run.terminal_state_stored(state):
        return
    if store.has_run(run.run_id):
        store.record_state(run.run_id, state.state, state.exit_code, state.reason)
        if state.terminal:
            run.mark_terminal_state_stored(state)


def wait(run: RunDir, store: Store, timeout: float | None = None) -> JobState:
    """Poll until the run is terminal, backing off from 0.5 s to 10 s."""
    delay, start = 0.5, time.monotonic()
    while True:
        state = refresh(run, store)
        if state.terminal or (timeout is not None and time.monotonic() - start > timeout):
            return state
        time.sleep(delay)
        delay = min(delay * 1.5, 10.0)


def cancel(run: RunDir, store: Store | None) -> JobState:
    """Cancel the run's job and record the result; a run already ended keeps its state."""
    sub = run.submission
    before = current_state(run)
    if before.terminal:
        return before
    if sub:
        get_scheduler(sub["scheduler"]).cancel(sub["job_id"], run.path)
    return refresh(run, store)
