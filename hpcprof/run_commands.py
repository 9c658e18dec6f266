"""The run commands of `hpcprof`: sites, render, submit, status, cancel, collect, resubmit,
templates (config -> render -> schedulers -> collect -> store -> report).

Each command imports what it uses when it runs (`hpcprof sites` needs neither pandas nor SQLAlchemy)."""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from hpcprof.config import MAX_POINTS
from hpcprof.errors import UserError
from hpcprof.rundir import RunDir, all_runs, find_run
from hpcprof.workdirs import known_workdirs, known_workdirs_file, record_workdir

if TYPE_CHECKING:
    from hpcprof.campaign import Plan
    from hpcprof.config.site import SiteConfig
    from hpcprof.schedulers.base import JobState
    from hpcprof.store import Store

console = Console(stderr=True, soft_wrap=True)

workdir_option = click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), callback=lambda ctx, param, value: _workdir(value),
    default=lambda: os.environ.get("HPCPROF_WORKDIR", "hpcprof-runs"), show_default="$HPCPROF_WORKDIR or ./hpcprof-runs",
    help="Where run directories (and the default SQLite store) live.")
db_option = click.option("--db", default=None, help="SQLAlchemy URL of the campaign store (default $HPCPROF_DB "
                         "or sqlite:///<workdir>/hpcprof.db).")
site_option = click.option("--site", "site_name", default="local", show_default=True, help="Site config name.")
site_file_option = click.option("--site-file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                                help="A site config file (overrides --site).")
set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                          help="Override an experiment field, e.g. resources.nodes=2 (repeatable).")
max_points_option = click.option("--max-points", type=click.IntRange(min=1), default=MAX_POINTS, show_default=True,
                                 help="Most sweep points to expand (a larger sweep is refused).")
templates_option = click.option("--templates", type=click.Path(file_okay=False, path_type=Path),
                                help="Directory of edited templates (from `hpcprof templates copy`).")


after_option = click.option("--after", multiple=True, metavar="RUN|SWEEP",
                            help="Start only once these runs' jobs have ended, in any state (Slurm "
                                 "--dependency=afterany, PBS -W depend=afterany); repeatable.")


lookup_site_option = click.option(
    "--site", "lookup_site", default=None, metavar="SITE",
    help="Look in SITE's workdir (its workdir:, or where your submits to SITE went) instead of --workdir.")


def with_site_lookup(command: Callable[..., None]) -> Callable[..., None]:
    """Give a read command (with `runs` and `workdir` parameters) `--site SITE`: its workdir
    becomes `read_workdir(workdir, SITE, runs)`."""
    @functools.wraps(command)
    def run(*args: Any, lookup_site: str | None = None, **kwargs: Any) -> None:
        kwargs["workdir"] = read_workdir(kwargs["workdir"], lookup_site, kwargs.get("runs", ()))
        command(*args, **kwargs)

    return lookup_site_option(run)


def read_workdir(workdir: Path, lookup_site: str | None, refs: tuple[str, ...] = ()) -> Path:
    """The workdir a read command (status, collect, report, compare) looks in: --workdir or
    $HPCPROF_WORKDIR when given, else --site's workdir (its `workdir:` expanded, else the latest
    recorded for that site), else ./hpcprof-runs. When that holds no runs (and no RUN given is a
    path), the error lists the workdirs submit recorded that do."""
    from hpcprof.rundir import all_runs

    ctx = click.get_current_context()
    given = ctx.get_parameter_source("workdir") is not click.core.ParameterSource.DEFAULT
    if lookup_site is not None and not given and not os.environ.get("HPCPROF_WORKDIR"):
        workdir = site_workdir(lookup_site)
    if (workdir.is_dir() and all_runs(workdir)) or any(Path(ref).exists() for ref in refs):
        return workdir
    elsewhere = [(site, where, len(all_runs(where))) for site, where in reversed(known_workdirs())
                 if where != workdir.resolve() and where.is_dir()]
    elsewhere = [entry for entry in elsewhere if entry[2]]
    if elsewhere:
        listed = "; ".join(f"{where} (site {site}, {count} run{'s' if count != 1 else ''})"
                           for site, where, count in elsewhere[:5])
        raise UserError(f"no runs under {workdir}; runs you submitted are under {listed}: give --site "
                        f"{elsewhere[0][0]} or --workdir {elsewhere[0][1]}")
    return workdir


def site_workdir(name: str) -> Path:
    """Site `name`'s workdir: its `workdir:` (with its default account), else the latest one
    submit recorded for it."""
    from hpcprof.config.site import expand_workdir, find_site

    site = find_site(name)
    recorded = [where for site_name, where in known_workdirs() if site_name == site.name]
    if site.workdir is not None:
        try:
            return expand_workdir(site, site.defaults.account)
        except UserError:
            if not recorded:
                raise
    if recorded:
        return recorded[-1]
    raise UserError(f"--site {name}: the site has no workdir: and no submit to it was recorded "
                    f"({known_workdirs_file()}); give --workdir")


def _workdir(value: Path) -> Path:
    """--workdir: refuse an empty value (it would mean the current directory)."""
    if not str(value).strip() or str(value) == ".":
        raise UserError("--workdir is empty; give a directory (default ./hpcprof-runs)")
    return value


def open_store(workdir: Path, db: str | None, create: bool = True) -> Store | None:
    """The campaign store of `workdir` (or `db`). Read-only commands pass `create=False`:
    nothing is created then, and a SQLite store that does not exist is None. A URL that cannot
    be used is refused before the workdir is made."""
    from hpcprof.store import Store, database_url, make_engine, sqlite_file

    url = database_url(workdir, db)
    path = sqlite_file(make_engine(url))
    if not create:
        return None if path is not None and not path.is_file() else Store(url)
    made = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    lock_path = workdir / ".hpcprof.lock"
    try:
        with open(lock_path, "a") as lock:  # first use: one process creates the store
            fcntl.flock(lock, fcntl.LOCK_EX)
            return Store(url)
    except BaseException:
        if made:  # a refused store leaves no workdir behind
            lock_path.unlink(missing_ok=True)
            try:
                workdir.rmdir()
            except OSError:
                pass
        raise


def check_store(workdir: Path, db: str | None) -> None:
    """Refuse an unusable store (a bad URL, a missing driver, a file that is not a store)
    before anything is made or read."""
    from hpcprof.store import check_ours, database_url, make_engine, sqlite_file

    if (path := sqlite_file(make_engine(database_url(workdir, db)))) is not None:
        check_ours(path)


def runs_from(refs: tuple[str, ...], workdir: Path, damaged: bool = False) -> list[RunDir]:
    """Runs named by id or path, or every run in `workdir` (which must exist; runs with a
    damaged config.json only with `damaged`, else each is named in a warning)."""
    if refs:
        return [find_run(r, workdir) for r in refs]
    if not workdir.is_dir():
        raise UserError(f"--workdir {workdir}: no such work directory; give the --workdir you "
                        "submitted with (or $HPCPROF_WORKDIR)")
    return all_runs(workdir, damaged)


@click.group(invoke_without_command=True)
@click.pass_context
def sites(ctx: click.Context) -> None:
    """List the available site configs (`sites init NAME` writes your own)."""
    if ctx.invoked_subcommand is not None:
        return
    from hpcprof.config.site import available_sites, load_site_file
    from hpcprof.errors import warn
    from hpcprof.output import emit_rows

    rows = []
    for name, path in available_sites().items():
        try:
            site = load_site_file(path)
        except UserError as exc:  # one broken site config does not hide the others
            warn(f"{exc.format_message()}; not listed")
            continue
        launcher = site.launcher.kind + (f" ({site.launcher.flavor})" if site.launcher.flavor else "")
        rows.append({"site": name, "scheduler": site.scheduler, "launcher": launcher,
                     "gpus/node": site.node.gpus, "description": site.description, "file": str(path)})
    emit_rows(rows, ["site", "scheduler", "launcher", "gpus/node", "description", "file"], "table")


@sites.command("init")
@click.argument("name")
@click.option("--venv", "venv_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The venv (made with --system-site-packages on top of the site's module, hpcprof installed "
                   "into it) that every job activates after the site's setup.")
@click.option("--account", default=None, help="Your project: written as the site's defaults.account.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Site file to write [default: $XDG_CONFIG_HOME/hpcprof/sites/NAME.yaml, found by --site NAME].")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def sites_init(name: str, venv_dir: Path, account: str | None, output: Path | None, force: bool) -> None:
    """Write your own site file from site NAME (a shipped one): its setup also activates --venv,
    and --account becomes its default account. `--site NAME` then finds yours first."""
    from hpcprof.config.site import write_user_site

    path = write_user_site(name, venv_dir, account, output, force)
    console.print(f"wrote {path}; check it with `hpcprof doctor --site {name}`"
                  + ("" if output is None else f" --site-file {path}"), markup=False)


@click.command()
@click.argument("experiment", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@site_option
@site_file_option
@set_option
@templates_option
@max_points_option
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="Write each point's run directory here (DIR, or DIR/pNNN for a sweep): job.sh, "
                   "rank_wrapper.sh, config.json and logs/, ready to submit by hand (default: print job.sh). "
                   "DIR must be new or empty.")
@click.option("--force", is_flag=True, help="With -o: write into a directory that holds files (never into a "
              "submitted run's directory).")
def render(experiment: Path, site_name: str, site_file: Path | None, overrides: tuple[str, ...],
           templates: Path | None, max_points: int, output: Path | None, force: bool) -> None:
    """Render the job script and rank wrapper of EXPERIMENT for a site, without submitting."""
    from hpcprof import campaign
    from hpcprof.config.site import find_site
    from hpcprof.render.job import write_rendered
    from hpcprof.schedulers import get_scheduler

    site = find_site(site_name, site_file)
    planned = campaign.plan(experiment, site, list(overrides), Path("hpcprof-runs"), templates, max_points,
                            out_dir=output)
    if output is None:
        for run in planned.runs:
            click.echo(run.files["job.sh"])
        return
    write_rendered(planned.runs, output, force)
    for run in planned.runs:
        console.print(f"rendered {run.run_dir}: submit it as it is with "
                      f"`{get_scheduler(site.scheduler).by_hand.format(run_dir=run.run_dir)}`", markup=False)


@click.command()
@click.argument("experiment", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@site_option
@site_file_option
@set_option
@templates_option
@max_points_option
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              callback=lambda ctx, param, value: None if value is None else _workdir(value),
              help="Where run directories (and the default SQLite store) live [default: $HPCPROF_WORKDIR, "
                   "else the site's workdir:, else ./hpcprof-runs].")
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
    from hpcprof import campaign
    from hpcprof.config.site import find_site
    from hpcprof.render.containers import check_runtimes

    site = find_site(site_name, site_file)
    from_site = workdir is None and "HPCPROF_WORKDIR" not in os.environ and site.workdir is not None
    workdir = submit_workdir(workdir, site, experiment, overrides)
    planned = campaign.plan(experiment, site, list(overrides), workdir, templates, max_points)
    check_runtimes(site, [run.point.experiment.container for run in planned.runs])
    echo_notes(planned)
    if site.scheduler == "local" and site.container is None:  # elsewhere the job checks at its start
        from hpcprof.doctor import check_local_profilers

        for line in check_local_profilers(site, {run.point.experiment.profile.tool for run in planned.runs
                                                 if run.point.experiment.container is None}):
            console.print(line, markup=False)
    wait_for = after_jobs(after, workdir, site.scheduler)
    array = campaign.check_array(planned) if as_array else None
    if dry_run:
        for run in planned.runs:
            console.print(f"[bold]{run.run_id}[/] {run.point.params or ''} -> {run.run_dir}")
            click.echo(run.files["job.sh"])
        if array is not None:
            console.print(f"[bold]{planned.sweep_id}[/]: the array job script (task k runs point k's job.sh)")
            click.echo(array)
        return
    store = open_store(workdir, db)
    run_dirs = campaign.write(planned, store)
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
    from hpcprof import campaign

    if array is not None:
        for run, job_id in zip(run_dirs, campaign.submit_array(planned, run_dirs, array, store, wait_for)):
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
    from hpcprof import jobstate

    final = jobstate.wait(run_dirs, store)
    show_states(list(final.items()), "table")
    if any(s.state != "COMPLETED" for s in final.values()):
        sys.exit(1)


def after_jobs(refs: tuple[str, ...], workdir: Path, scheduler: str) -> list[str]:
    """The job ids of the runs named by --after (run ids, sweep ids or run directories)."""
    from hpcprof import campaign
    from hpcprof.rundir import select_runs

    campaign.check_after(scheduler, refs)
    return campaign.job_ids(select_runs(refs, workdir), scheduler) if refs else []


def submit_workdir(given: Path | None, site: SiteConfig, experiment: Path, overrides: tuple[str, ...]) -> Path:
    """--workdir, else $HPCPROF_WORKDIR, else the site's `workdir:` (its {account} from the
    experiment's resources or the site's defaults), else ./hpcprof-runs."""
    if given is not None:
        return given
    if os.environ.get("HPCPROF_WORKDIR"):
        return _workdir(Path(os.environ["HPCPROF_WORKDIR"]))
    if site.workdir is None:
        return Path("hpcprof-runs")
    from hpcprof.config.experiment import load_experiment
    from hpcprof.config.site import expand_workdir

    resources = load_experiment(experiment, list(overrides)).get("resources") or {}
    account = resources.get("account") if isinstance(resources, dict) else None
    return expand_workdir(site, account if isinstance(account, str) else site.defaults.account)


def show_states(pairs: list[tuple[RunDir, JobState]], fmt: str, collected: dict[str, str] | None = None) -> None:
    """One row per run: its sweep (what compare/report take), state, exit code, reason, job id, path
    (and how it was collected, when given)."""
    from hpcprof.output import emit_rows
    from hpcprof.rundir import sweep_of

    rows = [{"run": run.run_id, "sweep": sweep_of(run.run_id), "experiment": run.path.parent.name,
             "state": state.state, "exit_code": state.exit_code, "reason": state.reason,
             "job_id": run.submission.get("job_id", ""), "path": str(run.path),
             "collected": (collected or {}).get(run.run_id, "")} for run, state in pairs]
    columns = ["run", "sweep", "experiment", "state", "exit_code", "reason", "job_id", "path"]
    emit_rows(rows, columns + ["collected"] if collected else columns, fmt)


def collect_states(store: Store | None, run_ids: list[str]) -> dict[str, str]:
    """Per collected run: `complete`, or `partial: ` and its first problem (e.g. a profiled rank
    whose nsys recorded nothing)."""
    out = {}
    for run_id, record in (store.run_records(run_ids) if store is not None else {}).items():
        if record.get("collect_status"):
            note = (record.get("collect_note") or "").splitlines()
            out[run_id] = record["collect_status"] + (f": {note[0]}" if note else "")
    return out


@click.command()
@with_site_lookup
@click.argument("runs", nargs=-1)
@workdir_option
@db_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status(runs: tuple[str, ...], workdir: Path, db: str | None, fmt: str) -> None:
    """Show the state of RUNS (ids or paths; default: every run in the workdir)."""
    from hpcprof import jobstate

    selected = runs_from(runs, workdir)
    states = jobstate.current_states(selected)  # one scheduler query for all the runs
    store = open_store(workdir, db, create=False)
    jobstate.record(states, store)
    show_states(list(states.items()), fmt, collect_states(store, [run.run_id for run in states]))


@click.command()
@click.argument("runs", nargs=-1, required=True)
@workdir_option
@db_option
def cancel(runs: tuple[str, ...], workdir: Path, db: str | None) -> None:
    """Cancel RUNS (ids or paths)."""
    from hpcprof import jobstate

    selected = runs_from(runs, workdir)
    store = open_store(workdir, db, create=False)
    failed = []
    for run in selected:  # one run that cannot be cancelled does not stop the others
        try:
            state = jobstate.cancel(run, store)
        except UserError as exc:
            failed.append(f"{run.run_id}: {exc.format_message()}")
            continue
        console.print(f"{run.run_id}: cancel requested, now {state.state}", markup=False)
    if failed:
        raise UserError(f"{len(failed)} of {len(selected)} run(s) not cancelled: {'; '.join(failed)}")


@click.command()
@click.argument("runs", nargs=-1)
@workdir_option
@db_option
@click.option("--workers", type=click.IntRange(1, 4096), default=1, show_default=True,
              help="Processes analysing rank files in parallel (under `mpiexec -n N python -m "
                   "mpi4py.futures -m hpcprof collect` the MPI workers are used instead).")
@click.option("--submit", "as_job", is_flag=True, help="Send this collect to the site's scheduler as a job "
              "that starts once the runs' jobs have ended (any state); it is a run of its own (status shows it).")
@click.option("--site", "site_name", default=None, metavar="SITE",
              help="Look in SITE's workdir (as status --site); with --submit, the site that runs the collect job "
                   "[default: local].")
@site_file_option
@click.option("--walltime", default="01:00:00", show_default=True, help="Walltime of the --submit job.")
def collect(runs: tuple[str, ...], workdir: Path, db: str | None, workers: int, as_job: bool, site_name: str | None,
            site_file: Path | None, walltime: str) -> None:
    """Collect finished RUNS (default: every finished run): results/*.parquet and the store.

    Exit status 3 when a run or a file could not be collected (each is named in one line and the
    run is recorded as partially collected); everything else is collected."""
    from hpcprof import jobstate
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


def collected_after_end(run: RunDir, store: Store) -> bool:
    """Whether the run ended (DONE), was collected completely (the store says so) and its results
    were written after it ended; a partial collect is tried again."""
    from hpcprof.results import results_dir

    done = run.path / "DONE"
    tables = list(results_dir(run.path).glob("*.parquet")) if done.exists() else []
    if not tables or max(t.stat().st_mtime for t in tables) < done.stat().st_mtime:
        return False
    record = store.run_record(run.run_id)
    return record is not None and record.get("collect_status") == "complete"


def submit_collect(refs: tuple[str, ...], workdir: Path, db: str | None, workers: int, site_name: str,
                   site_file: Path | None, walltime: str) -> None:
    """`collect --submit`: a job of the site's scheduler that runs `hpcprof collect` for the runs
    once their jobs have ended."""
    from hpcprof import campaign, jobstate
    from hpcprof.config.site import find_site
    from hpcprof.rundir import select_runs

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
    from hpcprof import campaign, jobstate
    from hpcprof.rundir import select_runs

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
    for old, new in zip(chosen, run_dirs):
        console.print(f"{old.run_id} -> {new.run_id}", markup=False)
    launch(planned, run_dirs, store, wait, [], None)
    if wait:
        finish(run_dirs, store)


@click.group()
def templates() -> None:
    """Editable copies of the job-script templates."""


@templates.command("copy")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def templates_copy(directory: Path) -> None:
    """Copy the shipped templates into DIRECTORY; use them with --templates DIR or a site's
    `templates:` key."""
    from hpcprof.atomic import atomic_write
    from hpcprof.render.job import shipped_template_dir

    sources = sorted(shipped_template_dir().glob("*.j2"))
    existing = [directory / p.name for p in sources if (directory / p.name).exists()]
    if existing:
        raise UserError(f"{existing[0]} exists; copy into a new or empty directory")
    made = not directory.exists()
    written: list[Path] = []
    try:  # all the templates or none: a failure (a full disk) leaves nothing to block the retry
        for path in sources:
            written.append(atomic_write(directory / path.name, path.read_bytes(), what="template"))
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        if made:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    for path in written:
        console.print(f"wrote {path}", markup=False)


@templates.command("vars")
def templates_vars() -> None:
    """The variables and filters the job and wrapper templates can use."""
    from hpcprof.render.job import MANIFEST_VARS, TEMPLATE_FILTERS, TEMPLATE_VARS

    width = max(map(len, [*TEMPLATE_VARS, *MANIFEST_VARS, *TEMPLATE_FILTERS]))
    click.echo("Variables (every template):")
    click.echo("\n".join(f"  {name:<{width}}  {text}" for name, text in TEMPLATE_VARS.items()))
    click.echo("Variables (mpijob.yaml.j2 only):")
    click.echo("\n".join(f"  {name:<{width}}  {text}" for name, text in MANIFEST_VARS.items()))
    click.echo("Filters:")
    click.echo("\n".join(f"  {name:<{width}}  {text}" for name, text in TEMPLATE_FILTERS.items()))
