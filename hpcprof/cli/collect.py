"""`hpcprof collect`: finished runs into results/*.parquet and the store, here or as a job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcprof.cli.common import check_store, console, open_store, runs_from
from hpcprof.cli.options import db_option, read_workdir, site_file_option, workdir_option
from hpcprof.core.errors import UserError

if TYPE_CHECKING:
    from hpcprof.campaign.store import Store
    from hpcprof.run.rundir import RunDir


@click.command()
@click.argument("runs", nargs=-1)
@workdir_option
@db_option
@click.option("--workers", type=click.IntRange(1, 4096), default=None,
              help="Processes analysing rank files in parallel [default: one per CPU this process may use (its "
                   "affinity: a job's cpuset), fewer where the memory available would not hold them; the log "
                   "says how many] (under `mpiexec -n N python -m mpi4py.futures -m hpcprof collect` the MPI "
                   "workers are used instead).")
@click.option("--submit", "as_job", is_flag=True, help="Send this collect to the site's scheduler as a job "
              "that starts once the runs' jobs have ended (any state); it is a run of its own (status shows it).")
@click.option("--site", "site_name", default=None, metavar="SITE",
              help="Look in SITE's workdir (as status --site); with --submit, the site that runs the collect job "
                   "[default: local].")
@site_file_option
@click.option("--walltime", default="01:00:00", show_default=True, help="Walltime of the --submit job.")
def collect(runs: tuple[str, ...], workdir: Path, db: str | None, workers: int | None, as_job: bool, site_name: str | None,
            site_file: Path | None, walltime: str) -> None:
    """Collect finished RUNS (default: every finished run): results/*.parquet and the store.

    Exit status 3 when a run or a file could not be collected (each is named in one line and the
    run is recorded as partially collected); everything else is collected."""
    from hpcprof.campaign import jobstate
    from hpcprof.collect import collect_runs

    workdir = read_workdir(workdir, site_name, runs)
    if as_job:
        submit_collect(runs, workdir, db, workers, site_name or "local", site_file, walltime)
        return
    check_store(workdir, db)
    selected = runs_from(runs, workdir, damaged=True)  # a damaged run is reported as not collected
    if not selected:
        raise UserError(f"no runs under {workdir}; submit one first (hpcprof submit EXP --site S)")
    store = open_store(workdir, db)
    if not runs:  # every run: those collected after they ended are done (name a run to collect it again)
        earlier = [run for run in selected if collected_after_end(run, store)]
        selected = [run for run in selected if run not in earlier]
        if earlier:
            console.print(f"{len(earlier)} run(s) collected earlier and unchanged since: skipped (name a run to "
                          "collect it again)", markup=False)
        if not selected:
            return
    status = collect_runs(selected, store, lambda run: jobstate.refresh(run, store),
                          log=lambda line: console.print(line, markup=False, highlight=False), workers=workers)
    if status:
        raise SystemExit(status)


#: the run's inputs besides its end: a file in these trees changed after the last collect is collected again
INPUTS = ("profiles", "steps", "forensics")


def changed_since(run: RunDir, when: float) -> bool:
    """Whether a file of the run's inputs (INPUTS) was written, replaced or had its times set after `when`
    (its change time: a copy with the old modification time is seen too)."""
    for sub in INPUTS:
        for directory, _, names in os.walk(run.path / sub):
            for name in names:
                try:
                    info = os.lstat(os.path.join(directory, name))
                except OSError:
                    continue
                if max(info.st_mtime, info.st_ctime) > when:
                    return True
    return False


def collected_after_end(run: RunDir, store: Store) -> bool:
    """Whether the run ended (DONE), was collected completely (the store says so), its results were
    written after it ended and no input changed since (changed_since); a partial collect is tried again."""
    from hpcprof.run.results import results_dir

    done = run.path / "DONE"
    try:
        tables = list(results_dir(run.path).glob("*.parquet")) if done.exists() else []
        written = max(t.stat().st_mtime for t in tables) if tables else 0.0
        if not tables or written < done.stat().st_mtime or changed_since(run, written):
            return False
    except OSError:         # a run directory that cannot be read: collecting it says why
        return False
    record = store.run_record(run.run_id)
    return record is not None and record.get("collect_status") == "complete"


def submit_collect(refs: tuple[str, ...], workdir: Path, db: str | None, workers: int | None, site_name: str,
                   site_file: Path | None, walltime: str) -> None:
    """`collect --submit`: a job of the site's scheduler that runs `hpcprof collect` for the runs
    once their jobs have ended."""
    from hpcprof.campaign import jobstate
    from hpcprof.campaign import submit as campaign
    from hpcprof.config.site import find_site
    from hpcprof.run.rundir import select_runs

    site = find_site(site_name, site_file)
    selected = select_runs(refs, workdir) if refs else [r for r in runs_from((), workdir)
                                                         if r.path.parent.name != campaign.COLLECT_JOB]
    if not selected:
        raise UserError(f"no runs under {workdir} to collect; submit some first (hpcprof submit EXP --site S)")
    pending = [run for run, state in jobstate.current_states(selected).items() if not state.terminal]
    wait_for = campaign.job_ids(pending, site.scheduler, "collect --submit: run")
    campaign.check_after(site.scheduler, wait_for)
    planned = campaign.plan_collect(selected, site, workdir, db, workers, walltime)
    store = open_store(workdir, db)
    (run,) = campaign.write(planned, store)
    job_id = campaign.submit(run, site, store, after=wait_for)
    console.print(f"collect job {run.run_id} submitted as {job_id}, after {len(wait_for)} job(s) of "
                  f"{len(selected)} run(s); follow it with `hpcprof status {run.run_id}`", markup=False)
