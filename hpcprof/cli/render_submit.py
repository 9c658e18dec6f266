"""`hpcprof render`, `submit` and `resubmit`: from an experiment (or ended runs) to submitted jobs.

The campaign, the site configs and the renderer every one of them uses are imported with this module,
when the command is resolved: start-up then ends with them (`hpcprof.__main__`)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcprof.campaign import jobstate
from hpcprof.campaign import submit as campaign
from hpcprof.cli.common import console, open_store, show_states, undo_new_workdir
from hpcprof.cli.options import (
    after_option,
    check_workdir,
    db_option,
    plan_options,
    submit_workdir_option,
    workdir_option,
)
from hpcprof.config.site import find_site
from hpcprof.core.errors import UserError
from hpcprof.core.safe_text import rich_markup
from hpcprof.render.job import write_rendered
from hpcprof.run.rundir import select_runs
from hpcprof.run.workdirs import record_workdir
from hpcprof.schedulers import get_scheduler

if TYPE_CHECKING:
    from hpcprof.campaign.store import Store
    from hpcprof.campaign.submit import Plan
    from hpcprof.config.site import SiteConfig
    from hpcprof.run.rundir import RunDir


@click.command()
@plan_options
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="Write each point's run directory here (DIR, or DIR/pNNN for a sweep): job.sh, "
                   "rank_wrapper.sh, config.json and logs/, ready to submit by hand (default: print job.sh). "
                   "DIR must be new or empty.")
@click.option("--force", is_flag=True, help="With -o: write into a directory that holds files (never into a "
              "submitted run's directory).")
@submit_workdir_option
def render(experiment: Path, site_name: str, site_file: Path | None, overrides: tuple[str, ...],
           templates: Path | None, max_points: int, output: Path | None, force: bool, workdir: Path | None) -> None:
    """Render the job script and rank wrapper of EXPERIMENT for a site, without submitting. Without
    -o, the job script's RUN_DIR is under the workdir `submit` uses (a new run id each time)."""
    from hpcprof.core.errors import UserError

    site = find_site(site_name, site_file)
    unresolved: UserError | None = None
    if output is None:
        try:
            workdir = submit_workdir(workdir, site, experiment, overrides)
        except UserError as exc:   # said after the experiment's own errors: the first cause first
            unresolved = exc
    planned = campaign.plan(experiment, site, list(overrides), workdir or Path("hpcprof-runs"), templates, max_points,
                            out_dir=output)
    if unresolved is not None:
        raise unresolved
    if output is None:
        for run in planned.runs:
            click.echo(run.files["job.sh"])
        return
    write_rendered(planned.runs, output, force)
    for run in planned.runs:
        console.print(f"rendered {run.run_dir}: submit it as it is with "
                      f"`{get_scheduler(site.scheduler).by_hand.format(run_dir=run.run_dir)}`", markup=False)


@click.command()
@plan_options
@submit_workdir_option
@db_option
@click.option("--dry-run", is_flag=True, help="Validate and render, print the plan, write nothing.")
@click.option("--wait", is_flag=True, help="Wait until every run ends (local runs: in the foreground; "
              "Ctrl-C cancels the run).")
@click.option("--array", "as_array", is_flag=True, help="Submit the sweep as one array job (Slurm --array, PBS -J); "
              "each point keeps its run directory.")
@after_option
def submit(experiment: Path, site_name: str, site_file: Path | None, overrides: tuple[str, ...],
           templates: Path | None, max_points: int, workdir: Path | None, db: str | None, dry_run: bool,
           wait: bool, as_array: bool, after: tuple[str, ...]) -> None:
    """Render EXPERIMENT (every sweep point) for a site and submit it."""
    from hpcprof.render.containers import check_runtimes

    site = find_site(site_name, site_file)
    from_site = workdir is None and "HPCPROF_WORKDIR" not in os.environ and site.workdir is not None
    workdir = submit_workdir(workdir, site, experiment, overrides)
    planned = campaign.plan(experiment, site, list(overrides), workdir, templates, max_points)
    check_runtimes(site, [run.point.experiment.container for run in planned.runs])
    echo_notes(planned)
    if site.scheduler == "local" and site.container is None:  # elsewhere the job checks at its start
        from hpcprof.render.launchers import check_local_launcher
        from hpcprof.render.profilers import check_local_profilers

        check_local_launcher(site)
        for line in check_local_profilers(site, {run.point.experiment.profile.tool for run in planned.runs
                                                 if run.point.experiment.container is None}):
            console.print(line, markup=False)
    wait_for = after_jobs(after, workdir, site.scheduler)
    array = campaign.check_array(planned) if as_array else None
    if wait:   # a Ctrl-C (SIGINT) cancels the runs, also where this process was started with SIGINT ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if dry_run:
        for run in planned.runs:
            console.print(f"[bold]{run.run_id}[/] {rich_markup(run.point.params or '')} -> {rich_markup(run.run_dir)}")
            click.echo(run.files["job.sh"])
        if array is not None:
            console.print(f"[bold]{planned.sweep_id}[/]: the array job script (task k runs point k's job.sh)")
            click.echo(array)
        return
    undo = undo_new_workdir(workdir, db)
    store = open_store(workdir, db)
    try:
        run_dirs = campaign.write(planned, store)
    except BaseException:       # refused (a full disk): no store or workdir of its own left behind
        store.engine.dispose()
        undo()
        raise
    launch(planned, run_dirs, store, wait, wait_for, array)
    try:
        record_workdir(site.name, workdir)
    except OSError as exc:   # the runs are submitted; only the record is missing
        console.print(f"note: {exc.strerror}", markup=False)
    if from_site:
        console.print(f"runs are under {workdir} (site {site.name}'s workdir): give status, collect, report and "
                      f"compare --site {site.name} (or --workdir {workdir})", markup=False)
    if wait:
        finish(run_dirs, store)


def echo_notes(planned: Plan) -> None:
    """Warn about the Echo global_config.json keys hpcprof ignores (each folder once)."""
    from hpcprof.workloads.args import echo_global_config_notes

    folders = {getattr(run.point.workload_args, "echo_input", None) for run in planned.runs}
    for folder in sorted(str(f) for f in folders if f is not None):
        for line in echo_global_config_notes(Path(folder)):
            console.print(line, markup=False)


def launch(planned: Plan, run_dirs: list[RunDir], store: Store, foreground: bool,
           wait_for: list[str], array: str | None) -> None:
    """Submit written runs: as one array job (`array`: its script), or one job per run (local
    runs in the foreground)."""
    if array is not None:
        for run, job_id in zip(run_dirs, campaign.submit_array(planned, run_dirs, array, store, wait_for), strict=True):
            console.print(f"submitted {run.run_id} as {job_id} -> {run.path}", markup=False)
        return
    for run in run_dirs:
        console.print(f"submitting {run.run_id} ({planned.site.scheduler}) -> {run.path}", markup=False)
        try:
            job_id = campaign.submit(run, planned.site, store, foreground=foreground, after=wait_for)
        except KeyboardInterrupt:
            console.print(f"{run.run_id}: interrupted, run cancelled; later points not submitted", markup=False)
            sys.exit(130)
        console.print(f"submitted {run.run_id} as {job_id}", markup=False)


def finish(run_dirs: list[RunDir], store: Store) -> None:
    """Wait for the runs, show their states; exit 1 unless all completed."""
    try:
        final = jobstate.wait(run_dirs, store)
    except KeyboardInterrupt:
        going = [run for run in run_dirs if not jobstate.current_state(run).terminal]
        for run in going:
            jobstate.cancel(run, store)
        console.print(f"interrupted: {len(going)} run(s) still going cancelled", markup=False)
        sys.exit(130)
    show_states(list(final.items()), "table")
    if any(s.state != "COMPLETED" for s in final.values()):
        sys.exit(1)


def after_jobs(refs: tuple[str, ...], workdir: Path, scheduler: str) -> list[str]:
    """The job ids of the runs named by --after (run ids, sweep ids or run directories)."""
    campaign.check_after(scheduler, refs)
    return campaign.job_ids(select_runs(refs, workdir), scheduler) if refs else []


def submit_workdir(given: Path | None, site: SiteConfig, experiment: Path, overrides: tuple[str, ...]) -> Path:
    """--workdir, else $HPCPROF_WORKDIR, else the site's `workdir:` (its {account} from the
    experiment's resources or the site's defaults), else ./hpcprof-runs."""
    if given is not None:
        return given
    if os.environ.get("HPCPROF_WORKDIR"):
        return check_workdir(Path(os.environ["HPCPROF_WORKDIR"]))
    if site.workdir is None:
        return Path("hpcprof-runs")
    from hpcprof.config.experiment import load_experiment
    from hpcprof.config.site import expand_workdir

    resources = load_experiment(experiment, list(overrides)).get("resources") or {}
    account = resources.get("account") if isinstance(resources, dict) else None
    return expand_workdir(site, account if isinstance(account, str) else site.defaults.account)


@click.command()
@click.argument("refs", nargs=-1, required=True, metavar="RUN|SWEEP...")
@workdir_option
@db_option
@click.option("--failed", is_flag=True, help="Only the runs that ended FAILED, CANCELLED, TIMEOUT, NODE_FAIL, "
              "OUT_OF_MEMORY or PREEMPTED (or were never submitted).")
@click.option("--wait", is_flag=True, help="Wait until the new runs end.")
def resubmit(refs: tuple[str, ...], workdir: Path, db: str | None, failed: bool, wait: bool) -> None:
    """Submit runs again as new runs (new run ids and directories, the same site and parameters),
    each linked to the run it replaces."""
    chosen = []
    for run, state in jobstate.current_states(select_runs(refs, workdir)).items():
        if not state.terminal and state.state != "NOT_SUBMITTED":
            raise UserError(f"resubmit {run.run_id}: the run is {state.state}; cancel it first (hpcprof cancel "
                            f"{run.run_id}) or leave it out")
        if not failed or state.state in campaign.RESUBMITTABLE:
            chosen.append(run)
    if not chosen:
        raise UserError(f"resubmit: none of {', '.join(refs)} failed; drop --failed to run completed runs again")
    planned = campaign.plan_resubmit(chosen, workdir)
    store = open_store(workdir, db)
    run_dirs = campaign.write(planned, store)
    for old, new in zip(chosen, run_dirs, strict=True):
        console.print(f"{old.run_id} -> {new.run_id}", markup=False)
    launch(planned, run_dirs, store, wait, [], None)
    if wait:
        finish(run_dirs, store)
