"""The built-in workloads' options (Args models), their torch.profiler schedule's checks and the
argv one rank runs, without torch.

`hpcprof render` and `submit` validate `workload.args` and build each rank's command line on a
login node, where torch may be slow to import or not work at all; so this module imports only
msgspec (through the config models' base), the standard library and `hpcprof.workloads.options`
(itself torch-free). The workload modules (seqpar, ddp, bootstrap, timing) import from here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from msgspec import Meta

from hpcprof.core.errors import UserError
from hpcprof.core.models import Model, run_checks
from hpcprof.workloads import options

Backend = Literal["auto", "nccl", "gloo"]
DeviceKind = Literal["auto", "cuda", "cpu"]
GpuMap = Literal["identity", "reverse"]

SCHEDULE_KEYS = ("skip_first", "wait", "warmup", "active", "repeat")
DEFAULT_TORCH_SCHEDULE = "wait=1,warmup=1,active=3,repeat=1"
SCHEDULE_HELP = "e.g. wait=1,warmup=1,active=3,repeat=1 (HPCPROF_TORCH_SCHEDULE)"
RESULTS_HELP = "default $HPCPROF_RUN_DIR/results or ./results"


def parse_schedule(text: str) -> dict[str, int]:
    """`wait=1,warmup=1,active=3,repeat=1` -> dict; unknown keys or non-integers raise ValueError."""
    values = {"skip_first": 0, "wait": 0, "warmup": 0, "active": 1, "repeat": 1}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in SCHEDULE_KEYS or not value.strip().isdigit():
            raise ValueError(f"bad item {item!r}; expected key=int with key in {', '.join(SCHEDULE_KEYS)}")
        values[key] = int(value)
    if values["active"] < 1:
        raise ValueError("active must be >= 1")
    return values


def check_schedule(value: str | None) -> None:
    """Check of the torch_schedule fields: parses (raising ValueError); None passes."""
    if value is not None:
        parse_schedule(value)


def in_reference_run() -> bool:
    """Whether this rank runs in the job's unprofiled reference run (profile.reference: the rank
    wrapper exports HPCPROF_STEPS_REFERENCE=1 there)."""
    return os.environ.get("HPCPROF_STEPS_REFERENCE") == "1"


def torch_profile_tool_requested(flag: bool) -> bool:
    """Torch profiler mode: the workload flag, or HPCPROF_PROFILE_TOOL=torch from the rank wrapper;
    never in the job's unprofiled reference run."""
    return not in_reference_run() and (flag or os.environ.get("HPCPROF_PROFILE_TOOL", "").strip().lower() == "torch")


def resolve_torch_schedule(flag_value: str | None) -> dict[str, int]:
    """Schedule from the flag, else HPCPROF_TORCH_SCHEDULE, else the default."""
    return parse_schedule(flag_value or os.environ.get("HPCPROF_TORCH_SCHEDULE") or DEFAULT_TORCH_SCHEDULE)


def schedule_length(schedule: dict[str, int]) -> int:
    """Steps a schedule needs before its last trace is written."""
    return schedule["skip_first"] + (schedule["wait"] + schedule["warmup"] + schedule["active"]) * schedule["repeat"]


def check_schedule_fits(workload: str, flag_value: str | None, steps: int | None) -> None:
    """UserError when the torch.profiler schedule is malformed or longer than `steps` (if given)."""
    source = "torch_schedule" if flag_value else "HPCPROF_TORCH_SCHEDULE"
    try:
        needed = schedule_length(resolve_torch_schedule(flag_value))
    except ValueError as exc:
        raise UserError(f"{workload}: {source}: {exc}") from None
    if steps is not None and needed > steps:
        raise UserError(f"{workload}: {source}: the schedule needs {needed} steps, only {steps} are run")


class Options(Model):
    """Base of the workloads' options: not strict, as command-line flags give text ("18")."""

    strict: ClassVar[bool] = False


class SeqparArgs(Options):
    """Options of the seqpar workload, as under `workload.args` in the experiment YAML."""

    sequence_length: Annotated[int, Meta(gt=0, description="sequence length S (rows of the all-gather buffer)")] = 4608
    hidden_dim: Annotated[int, Meta(gt=0, description="hidden dimension H")] = 9216
    iterations: Annotated[int, Meta(ge=1, description="timed iterations")] = 18
    warmup_iterations: Annotated[int, Meta(ge=0, description="untimed warm-up iterations")] = 10
    precision: Annotated[Literal["float32", "bfloat16", "float16"],
                         Meta(description="float32|bfloat16|float16")] = "float32"
    backend: Annotated[Backend, Meta(description="auto (nccl on GPU, gloo on CPU)|nccl|gloo")] = "auto"
    device: Annotated[DeviceKind, Meta(description="auto|cuda|cpu")] = "auto"
    gpu_map: Annotated[GpuMap, Meta(description="local rank r -> GPU r (identity) or n-1-r (reverse)")] = "identity"
    check: Annotated[bool, Meta(description="compare one iteration with a float64 reference")] = False
    profile_iterations: Annotated[str, Meta(
        description="A:B: cudaProfilerStart/Stop around timed iterations A..B-1 (0-based); default: around the "
                    "whole timed loop")] | None = None
    capture: Annotated[Literal["none", "iteration", "allgather", "matmul1", "matmul2", "reduce_scatter"], Meta(
        description="one cudaProfilerStart/Stop range per occurrence of this phase "
                    "(nsys --capture-range-end=repeat)")] = "none"
    torch_profiler: Annotated[bool, Meta(description="torch.profiler trace per rank "
                                                     "(also HPCPROF_PROFILE_TOOL=torch)")] = False
    torch_schedule: Annotated[str, Meta(description=SCHEDULE_HELP)] | None = None
    torch_gzip: Annotated[bool, Meta(description="write .pt.trace.json.gz (also HPCPROF_TORCH_GZIP=1)")] = False
    seed: Annotated[int, Meta(description="random seed (offset by rank)")] = 1234
    results_dir: Annotated[Path, Meta(description=RESULTS_HELP)] | None = None

    def __post_init__(self) -> None:
        run_checks(self, {"profile_iterations": check_window, "torch_schedule": check_schedule})
        if self.profile_iterations is not None:
            self.profile_iterations = self.profile_iterations.strip()
            end = int(self.profile_iterations.split(":")[1])
            if end > self.iterations:
                raise ValueError(f"profile_iterations end {end} is past iterations={self.iterations}")

    def profile_range(self) -> range | None:
        """Timed iterations inside the cudaProfiler window, if one was asked for."""
        if self.profile_iterations is None:
            return None
        start, end = (int(x) for x in self.profile_iterations.split(":"))
        return range(start, end)


def check_window(value: str | None) -> None:
    """`profile_iterations`: A:B with 0 <= A < B; None passes."""
    if value is not None:
        match = re.fullmatch(r"(\d+):(\d+)", value.strip())
        if match is None or int(match.group(1)) >= int(match.group(2)):
            raise ValueError("expected A:B with integers 0 <= A < B")


class DdpArgs(Options):
    """Options of the ddp workload, as under `workload.args` in the experiment YAML.

    Fields set here override the same keys of the Echo folder's local_config.json/global_config.json.
    """

    echo_input: Annotated[Path, Meta(description="Echo input folder (define_model.py, local_config.json, "
                                                 "global_config.json)")] | None = None
    model_file: Annotated[Path, Meta(description="define_model.py "
                                                 "(default: <echo_input>/define_model.py)")] | None = None
    world_size: Annotated[int, Meta(ge=1, description="expected number of ranks; a mismatch is an error")] | None = None
    cap_size: Annotated[float, Meta(gt=0, description="DDP bucket_cap_mb")] = 25.0
    epochs: Annotated[int, Meta(ge=1, description="counted epochs; the window is in the middle of the last one")] = 3
    batchsize: Annotated[int, Meta(ge=1, description="batch size passed to get_dataloader")] = 16
    warmup_epochs: Annotated[int, Meta(ge=0, description="epochs run before the counted ones")] = 0
    steps_per_epoch: Annotated[int, Meta(ge=1, description="use at most this many batches per epoch")] | None = None
    optimizer: Annotated[Literal["adamw", "adam", "sgd"], Meta(description="adamw|adam|sgd")] = "adamw"
    lr: Annotated[float, Meta(gt=0, description="learning rate")] = 2e-5
    window: Annotated[Literal["backward", "step"],
                      Meta(description="cudaProfilerStart/Stop around backward or the whole step")] = "backward"
    profile_iteration: Annotated[int, Meta(ge=0, description="global iteration of the window "
                                                             "(default: Echo's rule)")] | None = None
    window_barrier: Annotated[bool, Meta(description="barrier after cudaProfilerStart so all ranks enter the "
                                                     "window together")] = True
    cuda_version_check: Annotated[str, Meta(description="expected torch CUDA version, major.minor "
                                                        "(empty: no check)")] | None = None
    cuda_visible_devices: Annotated[str, Meta(description="CUDA_VISIBLE_DEVICES when the launcher "
                                                          "sets none")] | None = None
    backend: Annotated[Backend, Meta(description="auto (nccl on GPU, gloo on CPU)|nccl|gloo")] = "auto"
    device: Annotated[DeviceKind, Meta(description="auto|cuda|cpu")] = "auto"
    gpu_map: Annotated[GpuMap, Meta(description="local rank r -> GPU r (identity) or n-1-r (reverse)")] = "identity"
    torch_profiler: Annotated[bool, Meta(description="torch.profiler trace of the window per rank "
                                                     "(also HPCPROF_PROFILE_TOOL=torch)")] = False
    torch_schedule: Annotated[str, Meta(description=SCHEDULE_HELP)] | None = None
    torch_gzip: Annotated[bool, Meta(description="write .pt.trace.json.gz (also HPCPROF_TORCH_GZIP=1)")] = False
    results_dir: Annotated[Path, Meta(description=RESULTS_HELP)] | None = None

    def __post_init__(self) -> None:
        run_checks(self, {"torch_schedule": check_schedule})
        if self.echo_input is None and self.model_file is None:
            raise ValueError("echo_input or model_file is required")


WorkloadArgs = SeqparArgs | DdpArgs

# workload kind (`workload.kind` in the experiment YAML) -> its Args model; ranks run `python -m MODULES[kind]`.
ARGS_MODELS: dict[str, type[Options]] = {"seqpar": SeqparArgs, "ddp": DdpArgs}
MODULES = {"seqpar": "hpcprof.workloads.seqpar", "ddp": "hpcprof.workloads.ddp"}


def kind_argv(kind: str, args: Options, python: str) -> list[str]:
    """The argv one rank of built-in workload `kind` runs for these args."""
    return [python, "-m", MODULES[kind], *options.to_argv(args)]


def launch_argv(args: WorkloadArgs, python: str) -> list[str]:
    """The argv one rank runs for these args (seqpar or ddp, chosen by the model's type)."""
    kind = next(k for k, model in ARGS_MODELS.items() if isinstance(args, model))
    return kind_argv(kind, args, python)


#: Echo's global_config.json keys hpcprof does not read (the site config names the tools), and
#: what replaces each
ECHO_IGNORED_GLOBAL_KEYS = {"python_path": "paths.python", "nsys_path": "paths.nsys", "ncu_path": "paths.ncu"}


def echo_world_size(folder: Path) -> int | None:
    """The world_size an Echo folder's local_config.json asks for; None where it names none or
    cannot be read (the workload reports a damaged file itself)."""
    import json

    try:
        local = json.loads((Path(folder) / "local_config.json").read_text())
    except (OSError, ValueError):
        return None
    size = local.get("world_size") if isinstance(local, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def echo_global_config_notes(folder: Path) -> list[str]:
    """One warning line per global_config.json key of an Echo folder that hpcprof ignores (the
    tool paths: the site's `paths:` are used), so that they are not ignored silently."""
    import json

    path = Path(folder) / "global_config.json"
    try:
        keys = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return []   # the workload reports a damaged file itself
    ignored = [k for k in ECHO_IGNORED_GLOBAL_KEYS if isinstance(keys, dict) and keys.get(k)]
    return [f"warning: {path}: {key} is ignored; hpcprof runs the site's {ECHO_IGNORED_GLOBAL_KEYS[key]} "
            f"({key}={keys[key]!r} in Echo)" for key in ignored]
