"""The built-in workloads' options (pydantic Args models) and the argv one rank runs, without torch.

`hpcprof render` and `submit` validate `workload.args` and build each rank's command line on a
login node, where torch may be slow to import or not work at all; so this module imports only
pydantic, the standard library and `hpcprof.workloads.options` (itself torch-free). The workload
modules (seqpar, ddp, bootstrap, timing) import from here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hpcprof.workloads import options

Backend = Literal["auto", "nccl", "gloo"]
DeviceKind = Literal["auto", "cuda", "cpu"]
GpuMap = Literal["identity", "reverse"]

SCHEDULE_KEYS = ("skip_first", "wait", "warmup", "active", "repeat")


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


def check_schedule(value: str | None) -> str | None:
    """Validator of the torch_schedule fields: parses (raising ValueError) and keeps the text."""
    if value is not None:
        parse_schedule(value)
    return value


class SeqparArgs(BaseModel):
    """Options of the seqpar workload, as under `workload.args` in the experiment YAML."""

    model_config = ConfigDict(extra="forbid")

    sequence_length: int = Field(4608, gt=0, description="sequence length S (rows of the all-gather buffer)")
    hidden_dim: int = Field(9216, gt=0, description="hidden dimension H")
    iterations: int = Field(18, ge=1, description="timed iterations")
    warmup_iterations: int = Field(10, ge=0, description="untimed warm-up iterations")
    precision: Literal["float32", "bfloat16", "float16"] = Field("float32", description="float32|bfloat16|float16")
    backend: Backend = Field("auto", description="auto (nccl on GPU, gloo on CPU)|nccl|gloo")
    device: DeviceKind = Field("auto", description="auto|cuda|cpu")
    gpu_map: GpuMap = Field("identity", description="local rank r -> GPU r (identity) or n-1-r (reverse)")
    check: bool = Field(False, description="compare one iteration with a float64 reference")
    profile_iterations: str | None = Field(
        None, description="A:B: cudaProfilerStart/Stop around timed iterations A..B-1 (0-based); "
                          "default: around the whole timed loop"
    )
    capture: Literal["none", "iteration", "allgather", "matmul1", "matmul2", "reduce_scatter"] = Field(
        "none", description="one cudaProfilerStart/Stop range per occurrence of this phase (nsys --capture-range-end=repeat)"
    )
    torch_profiler: bool = Field(False, description="torch.profiler trace per rank (also HPCPROF_PROFILE_TOOL=torch)")
    torch_schedule: str | None = Field(None, description="e.g. wait=1,warmup=1,active=3,repeat=1 (HPCPROF_TORCH_SCHEDULE)")
    torch_gzip: bool = Field(False, description="write .pt.trace.json.gz (also HPCPROF_TORCH_GZIP=1)")
    seed: int = Field(1234, description="random seed (offset by rank)")
    results_dir: Path | None = Field(None, description="default $HPCPROF_RUN_DIR/results or ./results")

    @field_validator("profile_iterations")
    @classmethod
    def _window_syntax(cls, value: str | None) -> str | None:
        if value is None:
            return value
        match = re.fullmatch(r"(\d+):(\d+)", value.strip())
        if match is None or int(match.group(1)) >= int(match.group(2)):
            raise ValueError("expected A:B with integers 0 <= A < B")
        return value.strip()

    _schedule_syntax = field_validator("torch_schedule")(classmethod(lambda cls, v: check_schedule(v)))

    @model_validator(mode="after")
    def _window_inside_loop(self) -> SeqparArgs:
        if self.profile_iterations is not None:
            end = int(self.profile_iterations.split(":")[1])
            if end > self.iterations:
                raise ValueError(f"profile_iterations end {end} is past iterations={self.iterations}")
        return self

    def profile_range(self) -> range | None:
        """Timed iterations inside the cudaProfiler window, if one was asked for."""
        if self.profile_iterations is None:
            return None
        start, end = (int(x) for x in self.profile_iterations.split(":"))
        return range(start, end)


class DdpArgs(BaseModel):
    """Options of the ddp workload, as under `workload.args` in the experiment YAML.

    Fields set here override the same keys of the Echo folder's local_config.json/global_config.json.
    """

    model_config = ConfigDict(extra="forbid")

    echo_input: Path | None = Field(None, description="Echo input folder (define_model.py, local_config.json, global_config.json)")
    model_file: Path | None = Field(None, description="define_model.py (default: <echo_input>/define_model.py)")
    world_size: int | None = Field(None, ge=1, description="expected number of ranks; a mismatch is an error")
    cap_size: float = Field(25.0, gt=0, description="DDP bucket_cap_mb")
    epochs: int = Field(3, ge=1, description="counted epochs; the window is in the middle of the last one")
    batchsize: int = Field(16, ge=1, description="batch size passed to get_dataloader")
    warmup_epochs: int = Field(0, ge=0, description="epochs run before the counted ones")
    steps_per_epoch: int | None = Field(None, ge=1, description="use at most this many batches per epoch")
    optimizer: Literal["adamw", "adam", "sgd"] = Field("adamw", description="adamw|adam|sgd")
    lr: float = Field(2e-5, gt=0, description="learning rate")
    window: Literal["backward", "step"] = Field("backward", description="cudaProfilerStart/Stop around backward or the whole step")
    profile_iteration: int | None = Field(None, ge=0, description="global iteration of the window (default: Echo's rule)")
    window_barrier: bool = Field(True, description="barrier after cudaProfilerStart so all ranks enter the window together")
    cuda_version_check: str | None = Field(None, description="expected torch CUDA version, major.minor (empty: no check)")
    cuda_visible_devices: str | None = Field(None, description="CUDA_VISIBLE_DEVICES when the launcher sets none")
    backend: Backend = Field("auto", description="auto (nccl on GPU, gloo on CPU)|nccl|gloo")
    device: DeviceKind = Field("auto", description="auto|cuda|cpu")
    gpu_map: GpuMap = Field("identity", description="local rank r -> GPU r (identity) or n-1-r (reverse)")
    torch_profiler: bool = Field(False, description="torch.profiler trace of the window per rank (also HPCPROF_PROFILE_TOOL=torch)")
    torch_schedule: str | None = Field(None, description="e.g. wait=1,warmup=1,active=3,repeat=1 (HPCPROF_TORCH_SCHEDULE)")
    torch_gzip: bool = Field(False, description="write .pt.trace.json.gz (also HPCPROF_TORCH_GZIP=1)")
    results_dir: Path | None = Field(None, description="default $HPCPROF_RUN_DIR/results or ./results")

    _schedule_syntax = field_validator("torch_schedule")(classmethod(lambda cls, v: check_schedule(v)))

    @model_validator(mode="after")
    def _model_source(self) -> DdpArgs:
        if self.echo_input is None and self.model_file is None:
            raise ValueError("echo_input or model_file is required")
        return self


WorkloadArgs = SeqparArgs | DdpArgs

# workload kind (`workload.kind` in the experiment YAML) -> its Args model; ranks run `python -m MODULES[kind]`.
ARGS_MODELS: dict[str, type[BaseModel]] = {"seqpar": SeqparArgs, "ddp": DdpArgs}
MODULES = {"seqpar": "hpcprof.workloads.seqpar", "ddp": "hpcprof.workloads.ddp"}


def kind_argv(kind: str, args: BaseModel, python: str) -> list[str]:
    """The argv one rank of built-in workload `kind` runs for these args."""
    return [python, "-m", MODULES[kind], *options.to_argv(args)]


def launch_argv(args: WorkloadArgs, python: str) -> list[str]:
    """The argv one rank runs for these args (seqpar or ddp, chosen by the model's type)."""
    kind = next(k for k, model in ARGS_MODELS.items() if isinstance(args, model))
    return kind_argv(kind, args, python)


#: Echo's global_config.json keys hpcprof does not read (the site config names the tools), and
#: what replaces each
ECHO_IGNORED_GLOBAL_KEYS = {"python_path": "paths.python", "nsys_path": "paths.nsys", "ncu_path": "paths.ncu"}


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
