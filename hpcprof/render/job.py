"""Render one sweep point into the files of its run directory, and write them atomically."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import stat
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox
import msgspec

import hpcprof
from hpcprof import profilers
from hpcprof.config.experiment import Point
from hpcprof.config.site import SiteConfig
from hpcprof.core.atomic import WriteError, atomic_write, temp_path
from hpcprof.core.errors import UserError, expand_home
from hpcprof.core.models import dump
from hpcprof.core.resources import template_dir
from hpcprof.render.ceilings import UNPROFILED, ceilings_argv
from hpcprof.render.containers import check_container, effective_container, wrap_launch
from hpcprof.render.forensics import forensics_context, inject_files
from hpcprof.render.launchers import SIGPIPE_IGNORED, launch_argv, launcher_key
from hpcprof.render.quoting import directive, quote, quote_join
from hpcprof.render.rank_env import rank_env_context
from hpcprof.render.steps import reference_argv, reference_steps, steps_env, tool_options
from hpcprof.run.rundir import RECORD_FORMAT, RECORD_VERSION
from hpcprof.schedulers import get_scheduler
from hpcprof.workloads import rank_argv

WRAPPER_TEMPLATE = "rank_wrapper.sh.j2"
#: the ports MASTER_PORT is hashed into: below Linux's default ephemeral range (32768-60999), so that
#: no port the kernel hands out (an outgoing connection's, mpiexec's own PMI listener's) is the
#: rendezvous port; where one is, rank 0's TCPStore cannot bind it and the others wait on Hydra's
#: listener for ever
MASTER_PORTS = range(20000, 32768)


def shipped_template_dir() -> Path:
    """The templates shipped with hpcprof."""
    return template_dir()


def template_dirs(site: SiteConfig, user_dir: Path | None) -> tuple[Path, ...]:
    """Template search path: --templates DIR, then the site's directory, then the shipped ones
    (absolute, so that the cached Jinja environment never serves another directory's files)."""
    site_dir = expand_home(Path(site.templates), f"site {site.name}: field 'templates'") if site.templates else None
    dirs = [d for d in (user_dir, site_dir) if d]
    for d in dirs:
        if not d.is_dir():
            raise UserError(f"templates directory {d}: not found (make one with `hpcprof templates copy DIR`)")
    return (*(d.resolve() for d in dirs), shipped_template_dir())


#: the options of the templates' environment (also part of the compiled templates' cache key)
ENV_OPTIONS: dict[str, Any] = {"undefined": jinja2.StrictUndefined, "keep_trailing_newline": True,
                               "autoescape": False, "trim_blocks": False}
FILTERS = {"q": quote, "qjoin": quote_join, "directive": directive}


class CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """The templates' compiled code kept per user between commands (Jinja's bytecode cache: a
    template's entry is used only while its source is the same), so that a command pays Jinja's
    parse and compile of a template once, not every time. The cache is an optimisation: an entry
    that cannot be read or written is compiled again, never an error."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # a damaged entry (truncated, not Jinja's): compiled again
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:  # a full or read-only cache directory: not kept
            pass


def compiled_templates_cache() -> CompiledTemplates | None:
    """The compiled templates' cache, $XDG_CACHE_HOME/hpcprof/templates (default
    ~/.cache/hpcprof/templates; made mode 0700, as it holds code that renders run), its entries
    named for this Jinja and these environment options; None where that directory cannot be made,
    is not this user's alone, is a symbolic link (its target's mode is never changed) or is not
    absolute (no home directory: nothing is made in the current one)."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):  # unset, or relative: XDG says to ignore it
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(cache):
        return None
    directory = os.path.join(cache, "hpcprof", "templates")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        # the directory itself, never what a link there points to (O_NOFOLLOW: a link is not used)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return None
        os.fchmod(fd, 0o700)
    except OSError:
        return None
    finally:
        os.close(fd)
    options = repr((jinja2.__version__, jinja2.sandbox.SandboxedEnvironment.__name__,
                    sorted((k, getattr(v, "__name__", v)) for k, v in ENV_OPTIONS.items()), sorted(FILTERS)))
    return CompiledTemplates(directory, f"%s.{zlib.crc32(options.encode()):08x}.cache")


@functools.lru_cache(maxsize=8)
def jinja_env(dirs: tuple[Path, ...]) -> jinja2.Environment:
    """A strict, sandboxed Jinja environment with the shell-quoting filters: templates (a
    site's `templates:` may be shared by every user of a site directory) reach no Python
    internals (`cycler.__init__.__globals__` is refused), only the variables they are given."""
    env = jinja2.sandbox.SandboxedEnvironment(loader=jinja2.FileSystemLoader([str(d) for d in dirs]),
                                              bytecode_cache=compiled_templates_cache(), **ENV_OPTIONS)
    env.filters.update(FILTERS)
    return env


class RenderedRun(msgspec.Struct):
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
    """Render template `name`; any error of the template (syntax, undefined, refused by the
    sandbox, or an exception its expressions raise such as `{{ 1 // 0 }}`) becomes one line
    naming the file and line (the innermost template frame of the traceback)."""
    try:
        return env.get_template(name).render(context)
    except jinja2.TemplateSyntaxError as exc:
        raise UserError(f"template {exc.filename or exc.name or name}:{exc.lineno}: {exc.message}") from None
    except UserError:
        raise
    except Exception as exc:  # the template's own code failed: the template is the user's input
        import traceback

        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(".j2")]
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else name
        message = exc.message if isinstance(exc, jinja2.TemplateError) else f"{type(exc).__name__}: {exc}"
        raise UserError(f"template {where}: {message}") from None


#: every variable the job and wrapper templates get, with what it holds (`hpcprof templates vars`)
TEMPLATE_VARS: dict[str, str] = {
    "version": "hpcprof's version",
    "run_id": "the run id (sweep id, plus -pNNN for a sweep point)",
    "experiment": "the experiment's name",
    "site": "the site config: site.name, site.scheduler, site.node.gpus, site.launcher.kind, site.setup, "
            "site.gpu_affinity, site.pbs_select, site.sbatch_options, site.pbs_options, ...",
    "run_dir": "absolute path of the run directory (RUN_DIR in the job)",
    "submit_dir": "where the ranks start (the directory `hpcprof submit` ran in)",
    "env": "environment of the ranks: the site's env, then the experiment's (name -> value)",
    "nodes": "resources.nodes",
    "ranks_per_node": "ranks on each node",
    "world_size": "nodes x ranks_per_node",
    "walltime": "the walltime, HH:MM:SS",
    "queue": "resources.queue, else the site's default",
    "partition": "resources.partition, else the site's default (Slurm)",
    "account": "resources.account, else the site's default",
    "filesystems": "resources.filesystems, else the site's default (PBS)",
    "constraint": "resources.constraint, else the site's default (Slurm)",
    "job_name": "the job name (the experiment's name, at most 64 characters)",
    "log_path": "the job's stdout/stderr file, RUN_DIR/logs/job.out",
    "master_port": "a port for torch.distributed, fixed per run id (MASTER_PORTS)",
    "container": "the container config the ranks run in, or none",
    "launcher": "the launcher's tokens up to the rank wrapper (srun/mpiexec/torchrun ...); use with | qjoin",
    "launcher_ignores_sigpipe": "true where the job starts the launcher with SIGPIPE ignored (MPICH's Hydra "
                                "mpiexec: hpcprof.render.launchers.SIGPIPE_IGNORED says why)",
    "rank_argv": "the workload's command after the wrapper; use with | qjoin",
    "tool": "the profiler: nsys, ncu, torch, none (or one an installed package adds: hpcprof.profilers)",
    "selection": "the profiled ranks as written (e.g. local:0+first-nodes:1)",
    "condition": "the shell test that is true on a profiled rank",
    "tool_argv": "the profiler's program (the site's) and options, before its output option; use with | qjoin "
                 "([] where the workload profiles itself: torch)",
    "tool_output": "the profiler's option naming a rank's output file, followed by PROFILE_DIR/rankN ('' = none)",
    "tool_env": "what a profiled rank exports (name -> value), e.g. torch.profiler's schedule",
    "check_python": "the Python whose `import hpcprof` the job checks before any rank starts ('' = no check)",
    "check_tool": "the profiler binary the job checks is on PATH (and prints the version of) ('' = no check)",
    "forensics_env": "what the rank wrapper sets where unset for forensics (start-up hook, Flight Recorder); "
                     "empty when forensics.enabled is false",
    "forensics_signal": "Slurm: seconds before the walltime of the job's --signal=B:USR1 warning (0: none)",
    "forensics_timer": "seconds after the start at which the job warns itself of its walltime (0: none)",
    "steps_env": "what the rank wrapper exports for the optimizer step hook (hpcprof.render.steps); empty: no hook",
    "gpu_affinity": "the ranks' GPU convention: none, identity, reverse or local-rank (hpcprof.render.rank_env)",
    "gpu_order": "CUDA_VISIBLE_DEVICES of gpu_affinity local-rank on a reverse site ('' = not set)",
    "gpu_note": "what a rank's log line about its GPUs adds",
    "master_addr_local": "true when every rank is on one node (MASTER_ADDR 127.0.0.1 where unset)",
    "reference_argv": "the rank wrapper's arguments of the unprofiled reference run before the workload "
                      "(profile.reference: hpcprof.render.steps); empty: none",
    "reference_steps": "the optimizer steps after which the step hook ends a `command`'s reference run (0: "
                       "seqpar and ddp, whose reference runs the whole loop)",
    "ceilings_argv": "what each rank runs after the workload for the experiment's `ceilings:` (hpcprof bench "
                     "ceilings, after the rank wrapper and its unprofiled flag); [] when off; use with | qjoin",
}
#: what mpijob.yaml.j2 (Kubernetes) gets besides TEMPLATE_VARS
MANIFEST_VARS = {
    "experiment_container": "the experiment's own container block (image, options), or none",
    "k8s": "the site's kubernetes block (image, pvc, mount_path, namespace, gpu_resource, ...)",
    "k8s_name": "the MPIJob's name (the run id as a Kubernetes name)",
    "walltime_seconds": "the walltime in seconds (activeDeadlineSeconds)",
    "rank_command": "launcher, rank wrapper and workload as one shell command line",
}
#: Jinja filters the templates may use
TEMPLATE_FILTERS = {"q": "shell-quote one value", "qjoin": "shell-quote and join a list of tokens",
                    "directive": "check a value that goes into a #PBS/#SBATCH line"}


def template_context(point: Point, site: SiteConfig, run_dir: Path, run_id: str,
                     submit_dir: Path | None = None) -> dict[str, Any]:
    """The variables of the job and wrapper templates for one sweep point (see TEMPLATE_VARS).
    Ranks start in `submit_dir` (default: the run directory), so relative paths in a command's
    argv work as typed."""
    exp = point.experiment
    res = exp.resources
    python = resolve_python(site)
    profile = exp.profile
    profiler = profilers.get(profile.tool)
    tool_path = profiler.program_in(msgspec.structs.asdict(site.paths)) or ""
    launch = profiler.launch(tool_options(profile, exp.workload.kind), tool_path) if profiler.launch \
        else profilers.Launch([])
    scheduler = get_scheduler(site.scheduler)
    submit_dir = scheduler.start_dir(site, submit_dir, run_dir)
    container = None if scheduler.runs_containers else effective_container(site, exp.container)
    if container is not None:
        check_container(site, container)
    launcher_argv = launch_argv(site, res.nodes, point.ranks_per_node)
    env_names = sorted({**site.env, **exp.env})
    launcher, rank = wrap_launch(container, launcher_argv,
                                 rank_argv(exp.workload.kind, exp.workload.argv, point.workload_args, python),
                                 env_names, submit_dir not in (None, run_dir))
    ceilings = ceilings_argv(point, python, scheduler.runs_containers)
    reference = reference_argv(point, rank, scheduler.runs_containers)
    if ceilings:
        ceilings = [UNPROFILED, *wrap_launch(container, launcher_argv, ceilings, env_names,
                                             submit_dir not in (None, run_dir))[1]]
    # job-start checks (the job's own host, so not inside a container or a Kubernetes pod): the ranks'
    # Python imports hpcprof (built-in workloads and `python -m hpcprof ...` commands), the profiler runs
    checked = container is None and not scheduler.runs_containers
    uses_hpcprof = exp.workload.kind != "command" or "hpcprof" in exp.workload.argv[1:3]
    return {
        "check_python": python if checked and uses_hpcprof else "",
        "check_tool": tool_path if checked else "",
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
        "master_port": MASTER_PORTS.start + zlib.crc32(run_id.encode()) % len(MASTER_PORTS),
        "container": container,
        "launcher": launcher,
        "launcher_ignores_sigpipe": launcher_key(site) in SIGPIPE_IGNORED,
        "rank_argv": rank,
        "ceilings_argv": ceilings,
        "reference_argv": reference,
        "reference_steps": reference_steps(point),
        "tool": profile.tool,
        "selection": str(profile.selection),
        "condition": profile.selection.bash_condition(point.ranks_per_node),
        "tool_argv": launch.argv,
        "tool_output": launch.output,
        "tool_env": launch.env,
        **forensics_context(point, site, run_dir),
        "steps_env": steps_env(point),
        **rank_env_context(point, site),
    }


def render_point(point: Point, site: SiteConfig, run_dir: Path, run_id: str,
                 dirs: tuple[Path, ...], submit_dir: Path | None = None) -> RenderedRun:
    """Render the job script and rank wrapper of one sweep point."""
    exp = point.experiment
    profiler = profilers.get(exp.profile.tool)
    python = resolve_python(site)
    scheduler = get_scheduler(site.scheduler)
    context = template_context(point, site, run_dir, run_id, submit_dir)
    env = jinja_env(dirs)
    job = render_template(env, scheduler.template, context)
    wrapper = render_template(env, WRAPPER_TEMPLATE, context)
    config = {                  # the run record (hpcprof.run.record reads it back)
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "run_id": run_id,
        "experiment": dump(exp),
        "site": dump(site),
        "sweep_point": {"index": point.index, "params": point.params},
        "ranks_per_node": point.ranks_per_node,
        "world_size": point.world_size,
        "walltime": point.walltime,
        "python": python,
        "submit_dir": str(submit_dir or run_dir),
        "profile_extension": profiler.suffixes[0] if profiler.suffixes else None,
        "hpcprof_version": hpcprof.__version__,
    }
    files = {"job.sh": job, "rank_wrapper.sh": wrapper, **inject_files(point),
             **scheduler.extra_files(env, {**context, "experiment_container": exp.container}, site, run_dir)}
    return RenderedRun(run_id, run_dir, point, files, config)


RUN_SUBDIRS = ("logs", "profiles", "results", "tmp")


def write_files(rendered: RenderedRun, directory: Path) -> None:
    """The run's files (executable), its config.json and the empty sub-directories under
    `directory`, each file written whole or not at all."""
    for sub in RUN_SUBDIRS:
        (directory / sub).mkdir(parents=True, exist_ok=True)

    mode = 0o777 & ~current_umask()     # executable by those the umask lets read it (077: the owner only)

    def executable(content: str) -> Callable[[Path], None]:
        def write(tmp: Path) -> None:
            tmp.write_text(content)
            os.chmod(tmp, mode)
        return write

    for name, content in rendered.files.items():
        atomic_write(directory / name, executable(content))
    atomic_write(directory / "config.json", json.dumps(rendered.config, indent=1))


def current_umask() -> int:
    """This process's umask (read by setting it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_run(rendered: RenderedRun) -> Path:
    """Create the run directory atomically: build it under a temporary name, then rename (onto
    nothing, or an empty directory); a failure leaves nothing and names the directory."""
    final = rendered.run_dir
    if final.exists() and not (final.is_dir() and not any(final.iterdir())):
        raise UserError(f"run directory {final} already exists")
    tmp = temp_path(final)
    try:
        write_files(rendered, tmp)
        tmp.rename(final)
    except (OSError, WriteError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"cannot write run directory {final}: {exc.strerror}; nothing was written there") from None
    return final


#: files a submitted (recorded) run has: `render -o` never writes into such a directory
SUBMITTED_MARKS = ("submission.json", "status", "DONE", "state.stored")


def check_output_dir(path: Path, force: bool) -> None:
    """`render -o`: refuse a submitted run directory (always) and a directory holding files
    (without --force), before anything is written."""
    if not path.exists():
        return
    if not path.is_dir():
        raise UserError(f"-o {path}: exists and is not a directory; give a new directory")
    if mark := next((m for m in SUBMITTED_MARKS if (path / m).exists()), None):
        raise UserError(f"-o {path}: a submitted run directory (it has {mark}); it is never overwritten, "
                        "give a new directory")
    if not force and (first := next(iter(sorted(path.iterdir())), None)) is not None:
        raise UserError(f"-o {path}: not empty ({first.name} would be overwritten or mixed in); give a new "
                        "or empty directory, or add --force to overwrite the files rendered there")


def write_rendered(runs: list[RenderedRun], out_dir: Path, force: bool) -> None:
    """`render -o OUT_DIR`: every run directory checked (check_output_dir) before any is
    written; each written whole; on a failure the directories this call made are removed."""
    targets = [r.run_dir for r in runs]
    for path in dict.fromkeys([out_dir.resolve(), *targets]):
        check_output_dir(path, force)
    made: list[Path] = [] if out_dir.exists() else [out_dir]
    try:
        for run in runs:
            if run.run_dir.exists() and any(run.run_dir.iterdir()):  # --force: file by file, each whole
                write_files(run, run.run_dir)
            else:
                made.append(write_run(run))
    except BaseException:
        for path in reversed(made):
            shutil.rmtree(path, ignore_errors=True)
        raise


def array_script(scripts: dict[Path, str], directive: str, index_var: str, sweep_id: str) -> str:
    """One batch script running the job script of run directory k as task k of an array: the
    directives of the points (which must agree, except their output file) and a dispatch on
    `index_var`; each task's output goes to its run's logs/job.out."""
    def directives(text: str) -> tuple[str, list[str]]:
        lines = text.splitlines()
        block = [line for line in lines[1:] if line.startswith(directive)]
        kept = [line for line in block if not re.match(rf"{re.escape(directive)} (--output=|-o )", line)]
        return lines[0], kept

    (first_dir, first_text), *rest = scripts.items()
    shebang, common = directives(first_text)
    for run_dir, text in rest:
        _, own = directives(text)
        if own != common:
            differ = next((a for a, b in zip(own, common, strict=False) if a != b), (own + common)[0])
            raise UserError(f"--array: sweep point {run_dir.name} differs in `{differ}`; an array job needs the "
                            "same resources for every point (submit without --array)")
    cases = "\n".join(f"  {k}) hp_run={quote(str(run_dir))} ;;" for k, run_dir in enumerate(scripts))
    return "\n".join([
        shebang, *common,
        f"# ---- hpcprof: sweep {sweep_id} as one array job; task k runs point k's own job script",
        f'case "${{{index_var}:-}}" in',
        cases,
        f'  *) echo "hpcprof: no sweep point for array index ${{{index_var}:-}}" >&2; exit 2 ;;',
        "esac",
        'exec bash "$hp_run/job.sh" >> "$hp_run/logs/job.out" 2>&1',
        ""])
