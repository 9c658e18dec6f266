"""Plan and submit runs: config -> render -> scheduler, recorded in the store (their state
afterwards: hpcprof.campaign.jobstate)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from hpcprof.campaign.jobstate import cancel as cancel_run
from hpcprof.campaign.jobstate import refresh
from hpcprof.config import MAX_POINTS
from hpcprof.core.atomic import atomic_write
from hpcprof.core.errors import UserError
from hpcprof.run.rundir import RunDir, new_run_id
from hpcprof.schedulers import get_scheduler

if TYPE_CHECKING:  # plan/write import the models and the renderer when they run: status stays light
    from hpcprof.campaign.store import Store
    from hpcprof.config.experiment import Point
    from hpcprof.config.site import SiteConfig
    from hpcprof.render.job import RenderedRun


class Plan(msgspec.Struct):
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
    from hpcprof.config.experiment import expand, load_experiment

    source = f"experiment {experiment_file}"
    points = expand(load_experiment(experiment_file, overrides), site, source, max_points)
    return plan_points(points, site, workdir, templates, source, out_dir)


def plan_points(points: list[Point], site: SiteConfig, workdir: Path, templates: Path | None, source: str,
                out_dir: Path | None = None, submit_dir: Path | None = None) -> Plan:
    """Render resolved points into a Plan (see `plan`)."""
    from hpcprof.config.directives import check_rendered
    from hpcprof.render.job import render_point, template_dirs

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
        rendered = render_point(point, site, run_dir, run_id, dirs, submit_dir=submit_dir or Path.cwd())
        check_rendered(site.scheduler, rendered.files["job.sh"], site.defaults.max_walltime,
                       site.node.max_nodes, f"{source} point {point.index}")
        runs.append(rendered)
    return Plan(sweep_id, name, site, points[0].experiment.sweep, runs)


def plan_resubmit(runs: list[RunDir], workdir: Path) -> Plan:
    """New runs re-rendered from old ones (their site and resolved point, as config.json keeps
    them), in one new sweep; each new config.json names the run it replaces (`resubmit_of`)."""
    import msgspec

    from hpcprof.config.experiment import expand
    from hpcprof.config.site import SiteConfig
    from hpcprof.core.models import validate
    from hpcprof.run.record import ResolvedRun, read_record

    records = [read_record(run, ResolvedRun) for run in runs]
    sites = {json.dumps(r.site, sort_keys=True) for r in records}
    if len(sites) > 1:
        raise UserError("resubmit: the runs were submitted to different site configs; resubmit them one site at a time")
    site = validate(SiteConfig, json.loads(sites.pop()), "resubmit: the runs' site config")
    points = []
    for index, (run, record) in enumerate(zip(runs, records, strict=True)):
        data = {**record.experiment, "sweep": {}, "repeat": 1}
        (point,) = expand(data, site, f"run {run.run_id}", 1)
        points.append(msgspec.structs.replace(point, index=index, params=record.sweep_point.params))
    submit_dir = records[0].submit_dir                    # where the first submit ran (relative argv paths)
    planned = plan_points(points, site, workdir, None, "resubmit", submit_dir=Path(submit_dir) if submit_dir else None)
    for rendered, old in zip(planned.runs, runs, strict=True):
        rendered.config["resubmit_of"] = old.run_id
    return planned


#: the experiment name of `collect --submit` jobs
COLLECT_JOB = "hpcprof-collect"
#: the states `resubmit --failed` takes
RESUBMITTABLE = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                           "NOT_SUBMITTED"})


def plan_collect(runs: list[RunDir], site: SiteConfig, workdir: Path, db: str | None, workers: int | None,
                 walltime: str) -> Plan:
    """A one-rank run of `hpcprof collect RUN... --workdir W [--workers N] [--db URL]` on `site` (the URL
    only when given on the command line: a job script must not copy a password from $HPCPROF_DB;
    without N, the job's collect uses the CPUs of its allocation)."""
    from hpcprof.config.experiment import expand
    from hpcprof.render.job import resolve_python

    argv = [resolve_python(site), "-m", "hpcprof", "collect", *(run.run_id for run in runs),
            "--workdir", str(workdir.resolve()), *(["--workers", str(workers)] if workers else []),
            *(["--db", db] if db else [])]
    data = {"name": COLLECT_JOB, "workload": {"kind": "command", "argv": argv},
            "resources": {"nodes": 1, "ranks_per_node": 1, "walltime": walltime},
            # hpcprof's own collect is no program to watch or step: without the start-up hook (whose
            # watcher thread would make its pool fork from a fork server, whose socket lives in the
            # job's long $TMPDIR) and without the optimizer step hook
            "forensics": {"enabled": False}, "profile": {"window": {"auto": False}}}
    points = expand(data, site, "collect --submit")
    return plan_points(points, site, workdir, None, "collect --submit", submit_dir=workdir.resolve())


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
        store.link_resubmits({r.run_id: r.config["resubmit_of"] for r in plan_.runs if "resubmit_of" in r.config})
    except BaseException:
        for run in run_dirs:
            shutil.rmtree(run.path, ignore_errors=True)
        raise
    return run_dirs


def submit(run: RunDir, site: SiteConfig, store: Store, foreground: bool = False,
           after: Sequence[str] = ()) -> str:
    """Hand one run to its scheduler (local runs may run in the foreground), to start once the
    jobs `after` have ended."""
    scheduler = get_scheduler(site.scheduler)
    job_id = scheduler.submit(run.path / "job.sh", run.path, after)
    run.record_submission(scheduler.name, job_id)
    store.add_job(run.run_id, job_id, scheduler.name)
    try:
        if foreground:
            scheduler.follow(job_id, run.path)
    except KeyboardInterrupt:
        print(f"interrupted: cancelling {job_id}", file=sys.stderr)
        cancel_run(run, store)
        raise
    finally:
        refresh(run, store)
    return job_id


def check_array(plan_: Plan) -> str:
    """The sweep as one array job's script, once it is sure the sweep can be one on its site
    (before anything is written): a batch scheduler, at most the site's (or scheduler's) array
    size, the same resources for every point."""
    from hpcprof.render.job import array_script

    scheduler = get_scheduler(plan_.site.scheduler)
    if scheduler.directive is None or scheduler.array_index is None:
        raise UserError(f"--array: the {scheduler.name} scheduler runs no job arrays; submit without --array, "
                        "or use a slurm or pbs site")
    if len(plan_.runs) < scheduler.min_array_size:
        raise UserError(f"--array: {scheduler.name} arrays need at least {scheduler.min_array_size} points and "
                        f"this sweep has {len(plan_.runs)}; submit without --array")
    limit = plan_.site.max_array_size or scheduler.max_array_size
    if len(plan_.runs) > limit:
        raise UserError(f"--array: {len(plan_.runs)} sweep points, but site {plan_.site.name} takes arrays of at "
                        f"most {limit} (max_array_size); submit without --array or split the sweep")
    return array_script({r.run_dir: r.files["job.sh"] for r in plan_.runs}, scheduler.directive,
                        scheduler.array_index, plan_.sweep_id)


def submit_array(plan_: Plan, runs: list[RunDir], script_text: str, store: Store,
                 after: Sequence[str] = ()) -> list[str]:
    """Submit the written runs of a sweep as one array job (`script_text` from check_array; task
    k = point k); each run records its own task id, so status and cancel work per point."""
    scheduler = get_scheduler(plan_.site.scheduler)
    array_dir = runs[0].path.parent / f".{plan_.sweep_id}.array"
    script = atomic_write(array_dir / "array.sh", script_text)
    job_ids = scheduler.submit_array(script, array_dir, len(runs), after)
    for run, job_id in zip(runs, job_ids, strict=True):
        run.record_submission(scheduler.name, job_id)
        store.add_job(run.run_id, job_id, scheduler.name)
    return job_ids


def check_after(scheduler: str, after: Sequence[str]) -> None:
    """Refuse dependencies where the scheduler has no batch system, before anything is written."""
    from hpcprof.schedulers.base import no_dependencies

    if after and get_scheduler(scheduler).directive is None:
        no_dependencies(scheduler, after)


def job_ids(runs: list[RunDir], scheduler: str, option: str = "--after") -> list[str]:
    """The job ids of `runs` (to wait for), which must have been submitted to `scheduler`."""
    ids = []
    for run in runs:
        sub = run.submission
        if not sub.get("job_id"):
            raise UserError(f"{option} {run.run_id}: the run has no job id (never submitted, or its "
                            "submission.json is damaged)")
        if sub["scheduler"] != scheduler:
            raise UserError(f"{option} {run.run_id}: submitted to {sub['scheduler']}, not {scheduler}; "
                            "a job can only wait for jobs of its own scheduler")
        ids.append(sub["job_id"])
    return ids
