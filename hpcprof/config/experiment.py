"""Experiment files: what to run, on how much, profiled how, swept over what.

An experiment expands into one `Point` per sweep point; `--set dotted.key=value` overrides are
applied before validation, so every point is validated in full before anything is written.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml
from msgspec import Meta

from hpcprof import profilers
from hpcprof.config import MAX_POINTS, REPEAT
from hpcprof.config.categories import KernelCategoryRule
from hpcprof.config.container import ContainerConfig
from hpcprof.config.directives import check_fields, walltime_seconds
from hpcprof.config.forensics import ForensicsConfig
from hpcprof.config.profile import ProfileConfig
from hpcprof.config.site import (
    EnvValue,
    QueueLimits,
    SiteConfig,
    check_directive,
    check_env,
    check_env_total,
    check_text,
    check_walltime,
)
from hpcprof.config.validation import load_yaml, parse_yaml
from hpcprof.core.errors import UserError
from hpcprof.core.models import Model, dump, matching, run_checks, validate
from hpcprof.workloads import workload_args_model
from hpcprof.workloads.args import echo_world_size
from hpcprof.workloads.ceiling_specs import parse_collective, parse_gemm

#: an experiment's `name:` (it names directories and jobs)
check_experiment_name = matching(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}", "an experiment name: letters, digits "
                                 "and _.-, at most 64, starting with a letter or digit")
#: The launchers' rank variables the rank wrapper reads (templates/rank_wrapper.sh.j2) and the
#: ones it exports; an experiment's `env` setting one would give several ranks the same identity.
RANK_ENV = frozenset({
    "RANK", "LOCAL_RANK", "PALS_RANKID", "PALS_LOCAL_RANKID", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMIX_RANK", "PMI_ID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
    "SLURM_PROCID", "SLURM_LOCALID", "HPCPROF_RANK", "HPCPROF_LOCAL_RANK"})


def check_rank_env(env: dict[str, str]) -> None:
    """Set for every rank: shell identifiers, none that the launcher sets per rank (RANK, SLURM_PROCID, ...:
    named first) nor hpcprof's own (HPCPROF_*), within the kernel's limits."""
    clash = sorted(RANK_ENV.intersection(env))
    if clash:
        raise ValueError(f"sets the launcher's rank variable {', '.join(clash)}: remove it "
                         "(each rank gets its own from the launcher)")
    check_env(env)


def check_sweep_fields(fields: list[tuple[str, str]]) -> None:
    """No field set twice by a sweep ((sweep key, field) pairs): two keys naming one field (or
    a field and a field inside it, `resources` and `resources.nodes`), or one field twice in a
    zipped key, would drop values without a word."""
    for i, (key, name) in enumerate(fields):
        for other_key, other in fields[:i]:
            if name == other or name.startswith(other + ".") or other.startswith(name + "."):
                where = f"key {key!r} names '{name}' twice" if key == other_key and name == other else (
                    f"keys {other_key!r} and {key!r} both set '{min(name, other, key=len)}'")
                raise ValueError(f"sweep {where}: each field may be swept by one key only; "
                                 "zip them in one key (a,b: [[..., ...]]) or drop one")


def check_sweep(value: dict[str, list[Any]]) -> None:
    """An experiment's `sweep:`: keys that may be swept, each with values, zipped keys with
    lists of as many values, no field swept twice."""
    for key, values in value.items():
        names = key.split(",")
        if any(n.startswith("sweep") or n in ("name", REPEAT) for n in names):
            raise ValueError(f"cannot sweep over {key!r}")
        if not values:
            raise ValueError(f"sweep key {key!r} has no values")
        if len(names) > 1 and not all(isinstance(v, list) and len(v) == len(names) for v in values):
            raise ValueError(f"sweep key {key!r} zips {len(names)} keys: each value must be a list of "
                             f"{len(names)} values, e.g. [[1, 1], [2, 2]]")
    check_sweep_fields([(key, name) for key in value for name in key.split(",")])


class WorkloadConfig(Model):
    """The program every rank runs: `command` (any argv), `seqpar` or `ddp` with its args."""

    kind: Literal["command", "seqpar", "ddp"]
    argv: list[str] = []
    args: dict[str, Any] = {}

    def __post_init__(self) -> None:
        run_checks(self, {"argv": check_argv})
        if self.kind == "command" and not self.argv:
            raise ValueError("workload kind 'command' needs argv: [program, arg, ...]")
        if self.kind != "command" and self.argv:
            raise ValueError(f"argv is for kind 'command'; {self.kind} takes args: {{...}}")
        if self.kind == "command" and self.args:
            raise ValueError("kind 'command' takes argv, not args")


def check_argv(value: list[str]) -> None:
    """A command's argv: text without NUL bytes, a program first."""
    for item in value:
        check_text(item)
    if value and not value[0].strip():
        raise ValueError("argv[0] (the program) is empty")


class Resources(Model):
    """How much to ask for; queue/account/walltime override the site's defaults."""

    nodes: Annotated[int, Meta(ge=1, le=1 << 24)] = 1
    ranks_per_node: Annotated[int, Meta(ge=1, le=1 << 16)] | None = None
    walltime: str | None = None
    queue: str | None = None
    partition: str | None = None
    account: str | None = None
    filesystems: str | None = None
    constraint: str | None = None

    def __post_init__(self) -> None:
        run_checks(self, {"walltime": check_walltime, "queue": check_directive, "partition": check_directive,
                          "account": check_directive, "filesystems": check_directive,
                          "constraint": check_directive})


def each(parse: Any) -> Any:
    """A check of a list of specs: `parse` each, its ValueError naming the item."""
    def check(values: list[str]) -> None:
        for text in values:
            try:
                parse(text)
            except ValueError as exc:
                raise ValueError(f"{text!r}: {exc}") from None
    return check


class CeilingsConfig(Model):
    """`ceilings:` as a mapping: the sizes `hpcprof bench ceilings` measures after the workload
    (`ceilings: true`: the workload's own sizes; none given here: the same)."""

    # GEMMs `M,N,K[:dtype]` (dtype float32, tf32, bfloat16, float16; default bfloat16)
    gemm: list[str] = []
    # collectives `OP:BYTES[:dtype]` (all_gather, reduce_scatter, all_reduce; nccl-tests' size, K/M/G = 1024^n)
    collective: list[str] = []
    iters: Annotated[int, Meta(ge=1, le=100000)] = 20      # timed calls per measurement
    warmup: Annotated[int, Meta(ge=0, le=100000)] = 5      # untimed calls before them

    def __post_init__(self) -> None:
        run_checks(self, {"gemm": each(parse_gemm), "collective": each(parse_collective)})


class AnalysisConfig(Model):
    """How collect analyses the run."""

    # Echo's slowdown (DDP under nsys, ws-N vs ws-1): hpcprof's matching (name + occurrence) or
    # Echo's analyse.py exactly (launch index + equal demangled name)
    slowdown_match: Literal["hpcprof", "echo"] = "hpcprof"
    # kernel category rules tried before the site's and hpcprof's own (`gpu.<category>` metrics)
    kernel_categories: list[KernelCategoryRule] = []
    # how a sweep over world size scales: weak (the batch per rank fixed), strong (the global batch
    # fixed) or auto (seqpar strong, ddp weak, a command not stated: the report shows both)
    scaling: Literal["auto", "weak", "strong"] = "auto"


class Experiment(Model):
    """One experiment file."""

    name: str
    workload: WorkloadConfig
    resources: Resources = msgspec.field(default_factory=Resources)
    profile: ProfileConfig = msgspec.field(default_factory=ProfileConfig)
    env: dict[str, EnvValue] = {}
    sweep: dict[str, list[Any]] = {}
    container: ContainerConfig | None = None  # overrides the site's container block
    repeat: Annotated[int, Meta(ge=1, le=1000)] = 1  # runs per sweep point (params get "repeat": 0..N-1)
    analysis: AnalysisConfig = msgspec.field(default_factory=AnalysisConfig)
    forensics: ForensicsConfig = msgspec.field(default_factory=ForensicsConfig)
    # the GPUs each rank sees (hpcprof.render.rank_env): unset, the site's; `local-rank`: all of the
    # node's, ordered so that cuda:LOCAL_RANK is the rank's GPU (torchrun, Lightning, HF scripts)
    gpu_affinity: Literal["none", "identity", "reverse", "local-rank"] | None = None
    # after the workload, `hpcprof bench ceilings` over the same ranks in the same job (<run>/ceilings.json,
    # collect's bench_ceilings): true measures at the workload's sizes, a mapping names them
    ceilings: bool | CeilingsConfig = False

    def __post_init__(self) -> None:
        run_checks(self, {"name": check_experiment_name, "env": check_rank_env, "sweep": check_sweep})

    def sweep_points(self) -> list[dict[str, Any]]:
        """The sweep's points: the cartesian product over its keys, where a key `a,b` zips
        its keys together (its values are [a, b] pairs); each `repeat` times (param `repeat`)."""
        axes = [[dict(zip(key.split(","), v if "," in key else [v], strict=False)) for v in values]
                for key, values in self.sweep.items()]
        points = [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*axes)]
        if self.repeat == 1:
            return points
        return [{**p, REPEAT: r} for p in points for r in range(self.repeat)]


class Point(msgspec.Struct, kw_only=True):
    """One fully resolved sweep point, ready to render."""

    index: int
    params: dict[str, Any]            # the sweep values of this point
    experiment: Experiment
    workload_args: Any = None         # the workload's validated Args model (None for command)
    ranks_per_node: int
    walltime: str

    @property
    def world_size(self) -> int:
        return self.experiment.resources.nodes * self.ranks_per_node


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", YAML-parsed value); an environment value (`env.NAME=...`) is
    the text as typed (`0755` stays 0755)."""
    key, sep, raw = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_\-]+)*", key):
        raise UserError(f"--set {text!r}: expected dotted.key=value, e.g. resources.nodes=2")
    if key.startswith("env."):
        return key, raw
    try:
        value = parse_yaml(raw) if raw else ""
    except (yaml.YAMLError, RecursionError):
        value = raw
    return key, value


def set_dotted(data: dict[str, Any], key: str, value: Any, source: str) -> None:
    """Set `data[a][b]... = value` for key `a.b...`, creating mappings on the way."""
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(f"{source}: cannot set '{key}': '{part}' is not a mapping")
        node = child
    node[parts[-1]] = value


def load_experiment(path: Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The raw experiment mapping with `--set` overrides applied (validated later, per point).
    An override of a key the sweep sets is refused: the sweep would replace it unchecked."""
    data = load_yaml(path, "experiment")
    keys = []
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(data, key, value, f"--set {text}")
        keys.append((text, key))
    sweep = data.get("sweep")
    swept = [n for k in sweep for n in str(k).split(",")] if isinstance(sweep, dict) else []
    for text, key in keys:
        clash = next((n for n in swept if n == key or n.startswith(key + ".") or key.startswith(n + ".")), None)
        if clash is not None and key.split(".")[0] != "sweep":
            raise UserError(f"--set {text}: the sweep sets '{clash}' for every point, so this value would "
                            f"never be used; change the sweep instead (--set 'sweep={{...}}')")
    return data


def expand(data: dict[str, Any], site: SiteConfig, source: str, max_points: int = MAX_POINTS) -> list[Point]:
    """Validate the experiment against `site` and expand its sweep into points (at most
    `max_points`, counted before anything is expanded)."""
    base = validate(Experiment, data, source)
    count = base.repeat
    for values in base.sweep.values():
        count *= len(values)
    if count > max_points:
        repeats = f" ({count // base.repeat} x repeat {base.repeat})" if base.repeat > 1 else ""
        raise UserError(f"{source}: field 'sweep': {count} points{repeats}, more than the limit of {max_points}; "
                        "shrink the sweep or raise the limit with --max-points N")
    args_model = workload_args_model(base.workload.kind)
    points = []
    for index, params in enumerate(base.sweep_points()):
        if params:
            point_data = copy.deepcopy(data)
            point_data.pop("sweep", None)
            for key, value in params.items():
                if key != REPEAT:
                    set_dotted(point_data, key, value, f"{source} sweep")
            where = f"{source} (sweep point {index}: {', '.join(f'{k}={v!r}' for k, v in params.items())})"
            experiment = validate(Experiment, point_data, where)
        else:
            where, experiment = source, base
        workload_args = None
        if args_model is not None:
            workload_args = validate(args_model, experiment.workload.args, f"{where} workload.args")
        points.append(resolve_point(index, params, experiment, workload_args, site, where))
    return points


def check_queue(site: SiteConfig, queue: str | None, nodes: int, walltime: str, where: str) -> None:
    """The job fits its queue's limits in the site config (none listed: nothing to check);
    otherwise one line naming the field, the limit and the queues that would take it."""
    if not site.queues or queue is None:
        return
    name = queue.split("@")[0]                  # PBS queue@server
    if name not in site.queues:
        raise UserError(f"{where}: field 'resources.queue': {name} is not a queue of site {site.name} "
                        f"(known: {', '.join(site.queues)}); add it under `queues:` in the site config")
    seconds = walltime_seconds(walltime)

    def fits(limits: QueueLimits) -> str:
        low, high, longest = limits.limits_for(nodes)
        if nodes < low or (high is not None and nodes > high):
            return "nodes"
        if longest and seconds > walltime_seconds(longest):
            return "walltime"
        return ""

    problem = fits(site.queues[name])
    if not problem:
        return
    others = [q for q, limits in site.queues.items() if q != name and not fits(limits)]
    hint = f"; queues that take it: {', '.join(others)} (--set resources.queue=...)" if others else ""
    low, high, longest = site.queues[name].limits_for(nodes)
    if problem == "nodes":
        span = f"{low}-{high}" if high is not None else f"at least {low}"
        raise UserError(f"{where}: field 'resources.nodes': {nodes} nodes, but queue {name} of site "
                        f"{site.name} takes {span} nodes{hint}")
    raise UserError(f"{where}: field 'resources.walltime': {walltime}, but queue {name} of site {site.name} "
                    f"allows at most {longest} for {nodes} nodes{hint}")


def resolve_point(index: int, params: dict[str, Any], experiment: Experiment, workload_args: Any,
                  site: SiteConfig, where: str) -> Point:
    """Fill site defaults and check the resources are possible on the site."""
    res = experiment.resources
    try:
        check_env_total({**site.env, **experiment.env})
    except ValueError as exc:
        raise UserError(f"{where}: field 'env': {exc} (site {site.name}'s env included)") from None
    check_fields(site.scheduler, {f"resources.{k}": v for k, v in dump(res).items() if v is not None}, where)
    ranks_per_node = res.ranks_per_node or site.node.ranks_per_node
    walltime = res.walltime or site.defaults.walltime
    hw_threads = site.node.cores * site.node.threads_per_core
    if site.node.max_nodes and res.nodes > site.node.max_nodes:
        raise UserError(f"{where}: field 'resources.nodes': {res.nodes} nodes but site "
                        f"{site.name} has at most {site.node.max_nodes}")
    if ranks_per_node > hw_threads:
        raise UserError(f"{where}: field 'resources.ranks_per_node': {ranks_per_node} ranks but a "
                        f"{site.name} node has {hw_threads} hardware threads")
    depth = site.binding.depth or 1
    if ranks_per_node * depth > hw_threads:
        raise UserError(f"{where}: field 'resources.ranks_per_node': {ranks_per_node} ranks x depth "
                        f"{depth} exceeds the {hw_threads} hardware threads of a {site.name} node")
    if site.defaults.max_walltime and walltime_seconds(walltime) > walltime_seconds(site.defaults.max_walltime):
        raise UserError(f"{where}: field 'resources.walltime': {walltime} exceeds the site maximum "
                        f"{site.defaults.max_walltime}")
    check_queue(site, res.queue or site.defaults.queue, res.nodes, walltime, where)
    account = res.account or site.defaults.account
    if site.require_account and not account:
        raise UserError(f"{where}: field 'resources.account': site {site.name} requires an account (the project "
                        f"charged); set resources.account (e.g. --set resources.account=PROJECT) or the site's "
                        "defaults.account (hpcprof sites init --account PROJECT)")
    if site.gpu_account_suffix and site.node.gpus and account and not account.endswith(site.gpu_account_suffix):
        raise UserError(f"{where}: field 'resources.account': {account} is not a GPU allocation; GPU jobs on "
                        f"{site.name} charge accounts ending in {site.gpu_account_suffix}: use "
                        f"{account}{site.gpu_account_suffix}")
    selection = experiment.profile.selection
    world = res.nodes * ranks_per_node
    expected, field = getattr(workload_args, "world_size", None), "workload.args.world_size"
    if expected is None and (folder := getattr(workload_args, "echo_input", None)) is not None:
        # Echo's local_config.json holds it where the experiment does not (the experiment's wins)
        expected, field = echo_world_size(Path(folder)), f"world_size of {Path(folder) / 'local_config.json'}"
    if expected is not None and expected != world:
        raise UserError(f"{where}: field '{field}': {expected} but the resources give "
                        f"{world} ranks ({res.nodes} nodes x {ranks_per_node}); make them agree "
                        "(workload.args.world_size overrides Echo's)")
    profile = experiment.profile
    check = profilers.get(profile.tool).check
    problem = check(profile.options, experiment.workload.kind, profile.window) if check else None
    if problem is not None:
        raise UserError(f"{where}: field '{problem[0]}': {problem[1]}")
    if experiment.profile.tool != "none" and not any(
            selection.selects(r, r % ranks_per_node, ranks_per_node) for r in range(world)):
        raise UserError(f"{where}: field 'profile.ranks': {selection} selects none of the {world} ranks")
    return Point(index=index, params=params, experiment=experiment, workload_args=workload_args,
                 ranks_per_node=ranks_per_node, walltime=walltime)
