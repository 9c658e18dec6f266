"""Site configs: one YAML per site (scheduler + launcher + node shape + environment).

Sites are looked up by name in `--site-file PATH`, then `$HPCPROF_SITE_PATH` (colon-separated
directories), then the user's site directory (`$XDG_CONFIG_HOME/hpcprof/sites`, written by
`hpcprof sites init`), then the site configs shipped with hpcprof.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from hpcprof.config.categories import KernelCategoryRule
from hpcprof.config.container import ContainerConfig, KubernetesConfig
from hpcprof.config.directives import check_fields, walltime_seconds
from hpcprof.config.schedulers import SCHEDULER_NAMES
from hpcprof.config.validation import load_yaml
from hpcprof.core.errors import UserError, expand_home, shorten
from hpcprof.core.models import FieldError, Model, dump, matching, run_checks, validate
from hpcprof.core.resources import site_config_dir

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: a site config's `name:`
check_site_name = matching(r"[A-Za-z0-9_.\-]+", "a site name: letters, digits and _.- only")
#: a site's name: a file name in a site directory, never a path
SITE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
#: Names bash expands or runs on its own (BASH_ENV is expanded and sourced by every
#: non-interactive bash, e.g. the rank wrapper) or that the job script itself uses.
RESERVED_ENV = frozenset({"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "PS4",
                          "PROMPT_COMMAND", "RUN_DIR"})
#: hpcprof's own variables (templates/rank_wrapper.sh.j2, hpcprof/inject): no experiment or site `env` sets them
HOOK_ENV_PREFIX = "HPCPROF_"
#: A value inside a #PBS/#SBATCH line (queue, account, ...), and a whole extra option line.
DIRECTIVE_VALUE = re.compile(r"[A-Za-z0-9_.:@+&|,=/\-]+")
DIRECTIVE_OPTION = re.compile(r"-[A-Za-z0-9_.:@+&|,=/\- ]*")


#: the GPU affinities that leave each rank one GPU (cuda:0 is its GPU)
NARROWING_AFFINITIES = ("identity", "reverse")


def resolve_affinity(chosen: str | None, site_affinity: str, launcher_kind: str) -> str:
    """The ranks' GPU convention given the experiment's `gpu_affinity` (`chosen`, None where it does
    not choose): under a torchrun launcher a narrowing site's becomes `local-rank`
    (hpcprof.render.rank_env says why)."""
    if chosen is not None:
        return chosen
    if launcher_kind == "torchrun" and site_affinity in NARROWING_AFFINITIES:
        return "local-rank"
    return site_affinity


class EnvValue(str):
    """An environment value: text; a number is written as text (a bool is refused: `true` is
    rarely what a program wants in its environment, write "1" or "true")."""

    @classmethod
    def from_input(cls, value: Any) -> EnvValue:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"{shorten(repr(value), 80)} is not an environment value: give text or a number "
                             '(write "1" or "true" for a switch)')
        return cls(value)


def check_walltime(value: str | None) -> None:
    """Walltime as [H]H:MM:SS (or MM:SS), positive, minutes and seconds below 60; None passes."""
    if value is not None:
        walltime_seconds(value)


def check_text(value: str) -> None:
    """No NUL bytes (they cannot reach a process's argv or environment)."""
    if "\x00" in value:
        raise ValueError("contains a NUL byte")


#: The kernel's limit on one NAME=value string of an exec's environment (MAX_ARG_STRLEN, with its NUL)
MAX_ENV_STRING = 128 * 1024
#: The most the environment hpcprof sets may take in all: half of the usual ARG_MAX (2 MiB), which
#: the inherited environment and the argv share; beyond it every exec in the job fails with E2BIG
MAX_ENV_TOTAL = 1 << 20


def env_bytes(name: str, value: str) -> int:
    """What one variable takes of an exec's argument space (NAME=value, its NUL and pointer)."""
    return len(name.encode()) + len(value.encode()) + 2 + 8


def check_env(env: dict[str, str]) -> None:
    """Environment variable names must be shell identifiers, not ones bash acts on nor hpcprof's own
    (HPCPROF_*); each variable and all together within the kernel's limits."""
    for name, value in env.items():
        check_text(value)
        if env_bytes(name, value) - 8 > MAX_ENV_STRING:
            raise ValueError(f"environment variable {name} is {len(value.encode()):,} bytes; the kernel takes "
                             f"at most {MAX_ENV_STRING:,} per variable (MAX_ARG_STRLEN) and every program "
                             "of the job would fail to start (E2BIG): pass large data in a file")
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"environment variable name {name!r} is not a valid identifier")
        if name.startswith(HOOK_ENV_PREFIX):
            raise ValueError(f"environment variable {name} is hpcprof's own (its rank wrapper and start-up hook "
                             f"set the {HOOK_ENV_PREFIX}* variables from the experiment): remove it")
        if name in RESERVED_ENV:
            raise ValueError(f"environment variable {name} is reserved (bash or the job script "
                             f"uses it); not allowed: {', '.join(sorted(RESERVED_ENV))}")
    check_env_total(env)


def check_env_total(env: dict[str, str]) -> None:
    """All of `env` within MAX_ENV_TOTAL."""
    total = sum(env_bytes(name, value) for name, value in env.items())
    if total > MAX_ENV_TOTAL:
        raise ValueError(f"the environment takes {total:,} bytes in all; at most {MAX_ENV_TOTAL:,} (the kernel's "
                         "ARG_MAX is shared with the inherited environment and argv): pass large data in a file")


def check_directive(value: str | None) -> None:
    """A value that goes into a #PBS/#SBATCH line; None passes."""
    if value is not None and not DIRECTIVE_VALUE.fullmatch(value):
        raise ValueError("goes into a batch directive: use letters, digits and _.:@+&|,=/- only")


def check_options(values: list[str]) -> None:
    """Extra #PBS/#SBATCH option lines: each starts with '-', no quotes or line breaks."""
    for value in values:
        if not DIRECTIVE_OPTION.fullmatch(value):
            raise ValueError(f"{value!r} is not a batch option: start with '-', then letters, "
                             "digits, spaces and _.:@+&|,=/- only (e.g. '-r y')")


class Launcher(Model):
    """How ranks are started: mpiexec (PALS/Hydra/Open MPI), srun or torchrun."""

    kind: Literal["mpiexec", "srun", "torchrun"]
    flavor: Literal["pals", "hydra", "openmpi", "auto"] | None = None   # mpiexec only; auto: local sites
    mpi: Literal["pmi2", "pmix", "cray_shasta", "none"] | None = None  # srun --mpi=
    command: str | None = None          # path of the launcher binary (default: kind)
    extra_args: list[str] = []

    def __post_init__(self) -> None:
        if self.kind == "mpiexec" and self.flavor is None:
            raise ValueError("launcher.flavor is required for mpiexec: pals, hydra, openmpi or auto")
        if self.kind != "mpiexec" and self.flavor is not None:
            raise ValueError(f"launcher.flavor applies to mpiexec only, not {self.kind}")
        if self.kind != "srun" and self.mpi is not None:
            raise ValueError(f"launcher.mpi applies to srun only, not {self.kind}")


class NodeShape(Model):
    """What one compute node has."""

    gpus: Annotated[int, Meta(ge=0, le=1024)] = 0
    cores: Annotated[int, Meta(ge=1, le=1 << 20)] = 1             # physical cores
    threads_per_core: Annotated[int, Meta(ge=1, le=64)] = 1
    ranks_per_node: Annotated[int, Meta(ge=1, le=1 << 16)] = 1    # default ranks per node
    max_nodes: Annotated[int, Meta(ge=1, le=1 << 24)] | None = None


class Binding(Model):
    """CPU binding passed to the launcher."""

    depth: Annotated[int, Meta(ge=1, le=1 << 16)] | None = None    # mpiexec --depth (PALS) / cpus per task
    cpu_bind: str | None = None               # e.g. depth, numa, cores, list:24:16:8:0

    def __post_init__(self) -> None:
        run_checks(self, {"cpu_bind": check_cpu_bind})


def check_cpu_bind(value: str | None) -> None:
    """A launcher's CPU binding: no spaces or shell characters; None passes."""
    if value is not None and not re.fullmatch(r"[A-Za-z0-9_:,.\-]+", value):
        raise ValueError("cpu_bind takes letters, digits and ':,.-_' only, e.g. depth or list:0:8")


class Defaults(Model):
    """Scheduler defaults an experiment may override."""

    queue: str | None = None            # PBS -q / Slurm --qos
    partition: str | None = None        # Slurm --partition
    account: str | None = None
    filesystems: str | None = None      # PBS -l filesystems=
    constraint: str | None = None       # Slurm -C
    walltime: str = "00:30:00"
    max_walltime: str | None = None

    def __post_init__(self) -> None:
        run_checks(self, {"queue": check_directive, "partition": check_directive, "account": check_directive,
                          "filesystems": check_directive, "constraint": check_directive,
                          "walltime": check_walltime, "max_walltime": check_walltime})


class QueueLimits(Model):
    """What one queue (PBS -q) or QOS (Slurm --qos) accepts; `by_nodes` splits a routing queue
    (Polaris `prod`) into node ranges with their own walltime maxima, smallest first."""

    min_nodes: Annotated[int, Meta(ge=1, le=1 << 24)] = 1
    max_nodes: Annotated[int, Meta(ge=1, le=1 << 24)] | None = None
    max_walltime: str | None = None
    by_nodes: list[NodeRange] = []

    def __post_init__(self) -> None:
        run_checks(self, {"max_walltime": check_walltime})

    def limits_for(self, nodes: int) -> tuple[int, int | None, str | None]:
        """(min nodes, max nodes, max walltime) that apply to a job of `nodes` nodes."""
        for part in self.by_nodes:
            if nodes <= part.max_nodes:
                return self.min_nodes, self.max_nodes, part.max_walltime
        return self.min_nodes, self.max_nodes, self.max_walltime


class NodeRange(Model):
    """Jobs of up to `max_nodes` nodes in a routing queue, and their walltime maximum."""

    max_nodes: Annotated[int, Meta(ge=1, le=1 << 24)]
    max_walltime: str

    def __post_init__(self) -> None:
        run_checks(self, {"max_walltime": check_walltime})


#: `workdir:` of a site: text, {account} and {user}, and $VAR / ${VAR} (no command substitution)
WORKDIR = re.compile(r"[A-Za-z0-9_.~/+\-{}$]+")


class ToolPaths(Model):
    """Executables used on the compute nodes."""

    python: str = "python3"
    nsys: str = "nsys"
    ncu: str = "ncu"


class Peaks(Model):
    """The hardware's peaks that the report's `% of peak` uses instead of its table of known GPUs
    (hpcprof/report/peaks.py): dense matmul TFLOP/s per precision, link bandwidths per direction."""

    tflops: dict[Literal["float32", "tf32", "bfloat16", "float16", "float64"], float] = {}
    nvlink_GBps: Annotated[float, Meta(gt=0)] | None = None     # GPU-to-GPU inside a node, one direction
    network_GBps: Annotated[float, Meta(gt=0)] | None = None    # per node across nodes (NICs together), one direction
    source: str = ""                                  # where the figures come from (datasheet, measurement)

    def __post_init__(self) -> None:
        for precision, peak in self.tflops.items():
            if not peak > 0:
                raise FieldError("tflops", f"peaks.tflops.{precision}: {peak} is not a positive TFLOP/s figure")


class SiteConfig(Model, kw_only=True):
    """A site: scheduler + launcher + node shape + environment."""

    name: str
    description: str = ""
    scheduler: str                      # a name of hpcprof.config.schedulers (local, slurm, pbs, torque, ...)
    launcher: Launcher
    defaults: Defaults = msgspec.field(default_factory=Defaults)
    node: NodeShape = msgspec.field(default_factory=NodeShape)
    binding: Binding = msgspec.field(default_factory=Binding)
    gpu_affinity: Literal["none", "identity", "reverse"] = "none"
    setup: list[str] = []               # raw shell lines (module load, conda activate): not quoted
    env: dict[str, EnvValue] = {}
    paths: ToolPaths = msgspec.field(default_factory=ToolPaths)
    templates: str | None = None        # directory of user templates overriding the shipped ones
    pbs_select: str | None = None       # extra PBS select resources, e.g. "system=polaris"
    sbatch_options: list[str] = []      # extra #SBATCH lines, e.g. "--gpu-bind=none"
    pbs_options: list[str] = []         # extra #PBS lines, e.g. "-r y"
    container: ContainerConfig | None = None  # run ranks in an image (hpcprof.config.container)
    kubernetes: KubernetesConfig | None = None  # scheduler: kubernetes (MPIJob, PVC, image)
    queues: dict[str, QueueLimits] = {}  # queue (PBS) / QOS (Slurm) -> its limits, checked at render
    gpu_account_suffix: str | None = None  # GPU jobs charge accounts ending so (Perlmutter: "_g")
    workdir: str | None = None          # default work directory: /eagle/{account}/hpcprof, $PSCRATCH/hpcprof
    max_array_size: Annotated[int, Meta(ge=2, le=1 << 24)] | None = None  # largest --array (default: the scheduler's)
    peaks: Peaks | None = None          # hardware peaks for the report's % of peak (default: known GPUs)
    require_account: bool = False       # the scheduler refuses a job without one (Polaris: #PBS -A)
    kernel_categories: list[KernelCategoryRule] = []  # name rules tried before hpcprof's kernel categories

    def __post_init__(self) -> None:
        run_checks(self, {"name": check_site_name, "scheduler": check_scheduler, "env": check_env,
                          "pbs_select": check_directive, "sbatch_options": check_options, "pbs_options": check_options,
                          "workdir": check_workdir})
        if self.launcher.flavor == "auto" and (self.scheduler != "local" or self.container is not None):
            raise ValueError("launcher.flavor: auto asks the mpiexec of the machine that submits, which runs the "
                             "ranks of a local site without a container only; set pals, hydra or openmpi")
        try:
            check_fields(self.scheduler, {**{f"defaults.{k}": v for k, v in dump(self.defaults).items()},
                                          "pbs_select": self.pbs_select})
        except UserError as exc:  # -> a check of the whole site, whose message names its field
            raise ValueError(exc.format_message()) from None


def check_scheduler(value: str) -> None:
    """A name of hpcprof.config.schedulers."""
    if value not in SCHEDULER_NAMES:
        raise ValueError(f"{value!r} is not a scheduler; use one of {', '.join(SCHEDULER_NAMES)}")


def check_workdir(value: str | None) -> None:
    """A site's `workdir:` (WORKDIR); None passes."""
    if value is not None and not WORKDIR.fullmatch(value):
        raise ValueError(f"{value!r}: a path of letters, digits and ._/+-~, {{account}}, {{user}} and "
                         "$VAR only, e.g. /eagle/{account}/hpcprof or $PSCRATCH/hpcprof")


def expand_workdir(site: SiteConfig, account: str | None) -> Path:
    """The site's `workdir:` with {account}, {user} and $VAR / ${VAR} filled in; a field or
    variable without a value is a one-line error naming it."""
    import getpass

    template = site.workdir or ""
    if "{account}" in template and not account:
        raise UserError(f"site {site.name}: workdir {template} needs an account; set resources.account "
                        "(or the site's defaults.account), or give --workdir")
    text = template.replace("{account}", account or "").replace("{user}", getpass.getuser())

    def variable(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        if name not in os.environ:
            raise UserError(f"site {site.name}: workdir {template} uses ${name}, which is not set here; "
                            f"set it or give --workdir")
        return os.environ[name]

    return expand_home(Path(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", variable, text)),
                       f"site {site.name}: field 'workdir'")


def shipped_site_dir() -> Path:
    """Directory of the site configs shipped with hpcprof."""
    return site_config_dir()


def user_site_dir() -> Path:
    """The user's own site configs: $XDG_CONFIG_HOME/hpcprof/sites (default ~/.config/hpcprof/sites)."""
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "hpcprof" / "sites"


def site_dirs() -> list[Path]:
    """Where sites are looked up: $HPCPROF_SITE_PATH entries, the user's site directory, then
    the shipped ones."""
    extra = [Path(p) for p in os.environ.get("HPCPROF_SITE_PATH", "").split(":") if p]
    return [*extra, user_site_dir(), shipped_site_dir()]


def load_site_file(path: Path) -> SiteConfig:
    """Load and validate one site config file."""
    return validate(SiteConfig, load_yaml(path, "site config"), f"site config {path}")


def find_site(name: str, site_file: Path | None = None) -> SiteConfig:
    """The site called `name` (or the one in `site_file`)."""
    if site_file is not None:
        return load_site_file(site_file)
    if not SITE_NAME.fullmatch(name):
        raise UserError(f"--site {shorten(repr(name), 80)}: not a site name (letters, digits and _.- only); give "
                        "--site-file PATH for a site config elsewhere")
    for directory in site_dirs():
        path = directory / f"{name}.yaml"
        if path.is_file():
            return load_site_file(path)
    known = ", ".join(sorted(available_sites()))
    raise UserError(f"--site {name!r}: unknown site; available: {known} "
                    "(add sites with $HPCPROF_SITE_PATH or --site-file PATH)")


def available_sites() -> dict[str, Path]:
    """Site name -> file, earlier directories winning."""
    found: dict[str, Path] = {}
    for directory in reversed(site_dirs()):
        if directory.is_dir():
            for path in sorted(directory.glob("*.yaml")):
                found[path.stem] = path
    return found


def write_user_site(name: str, venv_dir: Path, account: str | None, output: Path | None, force: bool) -> Path:
    """Write the user's site file from shipped site `name`: its setup, then `source VENV/bin/activate`,
    and `account` as defaults.account; validated before it replaces anything. Returns its path."""
    import yaml

    from hpcprof.core.atomic import atomic_write

    source = shipped_site_dir() / f"{name}.yaml"
    if not source.is_file():
        find_site(name)  # the one-line "unknown site; available: ..." error
        raise UserError(f"sites init {name}: not a shipped site; start from one of the shipped ones "
                        f"(polaris, perlmutter, ...) or copy your file by hand")
    venv_dir = expand_home(venv_dir, "--venv").absolute()
    if not (venv_dir / "bin" / "activate").is_file():
        raise UserError(f"--venv {venv_dir}: no bin/activate there; make it first, e.g. `python -m venv "
                        f"--system-site-packages {venv_dir}` after the site's module is loaded (README: "
                        "Installing on a cluster)")
    data = load_yaml(source, "site config")
    data["setup"] = [*data.get("setup", []), f"source {venv_dir}/bin/activate"]
    if account is not None:
        data.setdefault("defaults", {})["account"] = account
    path = output or user_site_dir() / f"{name}.yaml"
    if path.exists() and not force:
        raise UserError(f"{path} exists; give --force to overwrite it or -o FILE")

    def write(tmp: Path) -> None:  # checked before it replaces anything
        tmp.write_text(f"# Written by `hpcprof sites init {name}` from {source}: its setup, then your venv.\n"
                       + yaml.safe_dump(data, sort_keys=False))
        load_site_file(tmp)

    return atomic_write(path, write, what="site config", inputs=None if output is None else (), option="-o")
