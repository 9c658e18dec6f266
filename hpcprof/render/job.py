"""Render one sweep point into the files of its run directory, and write them atomically."""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

import hpcprof
from hpcprof.config.experiment import Point
from hpcprof.config.site import SiteConfig
from hpcprof.errors import UserError
from hpcprof.render.containers import check_container, effective_container, wrap_launch
from hpcprof.render.launchers import launch_argv
from hpcprof.render.quoting import directive, quote, quote_join
from hpcprof.resources import template_dir
from hpcprof.schedulers import get_scheduler
from hpcprof.workloads import rank_argv

WRAPPER_TEMPLATE = "rank_wrapper.sh.j2"
PROFILE_EXTENSIONS = {"nsys": ".nsys-rep", "ncu": ".ncu-rep", "torch": ".pt.trace.json"}


def shipped_template_dir() -> Path:
    """The templates shipped with hpcprof."""
    return template_dir()


def template_dirs(site: SiteConfig, user_dir: Path | None) -> tuple[Path, ...]:
    """Template search path: --templates DIR, then the site's directory, then the shipped ones
    (absolute, so that the cached Jinja environment never serves another directory's files)."""
    dirs = [d for d in (user_dir, Path(site.templates).expanduser() if site.templates else None) if d]
    for d in dirs:
        if not d.is_dir():
            raise UserError(f"templates directory {d}: not found (make one with `hpcprof templates copy DIR`)")
    return (*(d.resolve() for d in dirs), shipped_template_dir())


@functools.lru_cache(maxsize=8)
def jinja_env(dirs: tuple[Path, ...]) -> jinja2.Environment:
    """A strict Jinja environment with the shell-quoting filters."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(d) for d in dirs]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False, trim_blocks=False)
    env.filters.update(q=quote, qjoin=quote_join, directive=directive)
    return env


@dataclass
class RenderedRun:
    """The files of one run, rendered in memory (nothing written yet)."""

    run_id: str
    run_dir: Path
    point: Point
    files: dict[str, str]          # relative path -> content
    config: dict[str, Any]


def resolve_python(site: SiteConfig) -> str:
    """The Python ranks run: the site's, or this interpreter for `auto` (local/CI sites)."""
    return sys.executable if site.paths.python == "auto" else site.paths.python


def render_template(env: jinja2.Environment, name: str, context: dict[str, Any]) -> str:
    """Render template `name`; any template error becomes one line naming the file and line
    (for errors raised while rendering, the innermost template frame of the traceback)."""
    try:
        return env.get_template(name).render(context)
    except jinja2.TemplateSyntaxError as exc:
        raise UserError(f"template {exc.filename or exc.name or name}:{exc.lineno}: {exc.message}") from None
    except jinja2.TemplateError as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(".j2")]
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else name
        raise UserError(f"template {where}: {exc.message}") from None


def render_point(point: Point, site: SiteConfig, run_dir: Path, run_id: str,
                 dirs: tuple[Path, ...], submit_dir: Path | None = None) -> RenderedRun:
    """Render the job script and rank wrapper of one sweep point. Ranks start in `submit_dir`
    (default: the run directory), so relative paths in a command's argv work as typed."""
    exp = point.experiment
    res = exp.resources
    scheduler = get_scheduler(site.scheduler)
    python = resolve_python(site)
    profile = exp.profile
    tool_args: list[str] = []
    tool_path = ""
    if profile.tool == "nsys":
        tool_args, tool_path = profile.nsys.argv(), site.paths.nsys
    elif profile.tool == "ncu":
        tool_args, tool_path = profile.ncu.argv(), site.paths.ncu
    if site.scheduler == "kubernetes":
        from hpcprof.schedulers.kubernetes import pod_start_dir
        submit_dir = pod_start_dir(site, submit_dir, run_dir)
    container = None if site.scheduler == "kubernetes" else effective_container(site, exp.container)
    if container is not None:
        check_container(site, container)
    launcher, rank = wrap_launch(container, launch_argv(site, res.nodes, point.ranks_per_node),
                                 rank_argv(exp.workload.kind, exp.workload.argv, point.workload_args, python),
                                 sorted({**site.env, **exp.env}), submit_dir not in (None, run_dir))
    context = {
        "version": hpcprof.__version__,
        "run_id": run_id,
        "experiment": exp.name,
        "site": site,
        "run_dir": str(run_dir),
        "submit_dir": str(submit_dir or run_dir),
        "env": {**site.env, **exp.env},
        "nodes": res.nodes,
        "ranks_per_node": point.ranks_per_node,
        "world_size": point.world_size,
        "walltime": point.walltime,
        "queue": res.queue or site.defaults.queue,
        "partition": res.partition or site.defaults.partition,
        "account": res.account or site.defaults.account,
        "filesystems": res.filesystems or site.defaults.filesystems,
        "constraint": res.constraint or site.defaults.constraint,
        "job_name": f"{exp.name}"[:64],
        "log_path": str(run_dir / "logs" / "job.out"),
        "master_port": 20000 + zlib.crc32(run_id.encode()) % 20000,
        "container": container,
        "launcher": launcher,
        "rank_argv": rank,
        "tool": profile.tool,
        "selection": str(profile.selection),
        "condition": profile.selection.bash_condition(point.ranks_per_node),
        "tool_path": tool_path,
        "tool_args": tool_args,
        "torch_schedule": profile.torch.schedule(),
        "torch_gzip": "1" if profile.torch.gzip else "0",
    }
    env = jinja_env(dirs)
    job = render_template(env, scheduler.template, context)
    wrapper = render_template(env, WRAPPER_TEMPLATE, context)
    config = {
        "run_id": run_id,
        "experiment": json.loads(exp.model_dump_json()),
        "site": json.loads(site.model_dump_json()),
        "sweep_point": {"index": point.index, "params": point.params},
        "ranks_per_node": point.ranks_per_node,
        "world_size": point.world_size,
        "walltime": point.walltime,
        "python": python,
        "profile_extension": PROFILE_EXTENSIONS.get(profile.tool),
        "hpcprof_version": hpcprof.__version__,
    }
    files = {"job.sh": job, "rank_wrapper.sh": wrapper}
    if site.scheduler == "kubernetes":
        from hpcprof.schedulers.kubernetes import MANIFEST, render_manifest
        files[MANIFEST] = render_manifest(env, {**context, "experiment_container": exp.container}, site, run_dir)
    return RenderedRun(run_id, run_dir, point, files, config)


def write_run(rendered: RenderedRun) -> Path:
    """Create the run directory atomically: build it under a temporary name, then rename."""
    final = rendered.run_dir
    if final.exists():
        raise UserError(f"run directory {final} already exists")
    tmp = final.with_name(f".{final.name}.tmp")
    try:
        for sub in ("logs", "profiles", "results", "tmp"):
            (tmp / sub).mkdir(parents=True, exist_ok=True)
        for name, content in rendered.files.items():
            path = tmp / name
            path.write_text(content)
            os.chmod(path, 0o755)
        (tmp / "config.json").write_text(json.dumps(rendered.config, indent=1))
        tmp.rename(final)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"cannot write run directory {final}: {exc.strerror}") from None
    return final
