"""Profile settings of an experiment: tool, rank selection and tool options.

Everything here is validated when the experiment is loaded, so a wrong option fails at render
time on the login node, not an hour later in the queue.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from hpcprof.models import FieldError, Model, run_checks
from hpcprof.ranks import RankSelection

NSYS_TRACES = ("cuda", "nvtx", "osrt", "cublas", "cublas-verbose", "cudnn", "cusparse", "cusolver",
               "mpi", "ucx", "oshmem", "openacc", "openmp", "opengl", "vulkan", "nvvideo",
               "python-gil", "syscall", "none")
#: optional NsysOptions fields -> `nsys profile` flags, in the order they are written
NSYS_FLAGS = {"nvtx_capture": "--nvtx-capture", "capture_range_end": "--capture-range-end",
              "stats": "--stats", "sample": "--sample", "cpuctxsw": "--cpuctxsw", "gpuctxsw": "--gpuctxsw",
              "cuda_graph_trace": "--cuda-graph-trace", "mpi_impl": "--mpi-impl",
              "python_sampling": "--python-sampling"}
SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_.,:@/=+\-]+$")


def check_traces(value: list[str]) -> None:
    """nsys --trace names."""
    for item in value:
        if item not in NSYS_TRACES:
            raise ValueError(f"unknown nsys trace {item!r}; allowed: {', '.join(NSYS_TRACES)}")


def check_range_end(value: str | None) -> None:
    """nsys --capture-range-end; None passes."""
    if value is not None and not re.fullmatch(r"stop|stop-shutdown|none|repeat(:\d+)?|repeat-shutdown:\d+", value):
        raise ValueError("capture_range_end must be stop, stop-shutdown, none, repeat[:N] or repeat-shutdown:N")


def check_nvtx_capture(value: str | None) -> None:
    """nsys --nvtx-capture: RANGE or RANGE@DOMAIN; None passes."""
    if value is not None and not SAFE_TOKEN.fullmatch(value.replace(" ", "_")):
        raise ValueError("nvtx_capture must be RANGE or RANGE@DOMAIN")


class NsysOptions(Model):
    """`nsys profile` options."""

    trace: list[str] = msgspec.field(default_factory=lambda: ["cuda", "nvtx", "osrt"])
    capture_range: Literal["none", "cudaProfilerApi", "nvtx"] = "none"
    nvtx_capture: str | None = None
    capture_range_end: str | None = None
    stats: bool = False
    sample: Literal["none", "cpu", "process-tree", "system-wide"] | None = None
    cpuctxsw: Literal["none", "process-tree", "system-wide"] | None = None
    gpuctxsw: bool | None = None
    cuda_graph_trace: Literal["graph", "node"] | None = None
    mpi_impl: Literal["openmpi", "mpich"] | None = None
    python_sampling: bool | None = None
    export_sqlite: bool = True
    extra_args: list[str] = []

    def __post_init__(self) -> None:
        run_checks(self, {"trace": check_traces, "nvtx_capture": check_nvtx_capture,
                          "capture_range_end": check_range_end})
        if self.capture_range == "nvtx" and not self.nvtx_capture:
            raise ValueError("capture_range nvtx needs nvtx_capture (RANGE or RANGE@DOMAIN)")
        if self.nvtx_capture and self.capture_range != "nvtx":
            raise ValueError("nvtx_capture needs capture_range: nvtx")
        if self.capture_range_end and self.capture_range == "none":
            raise ValueError("capture_range_end needs capture_range cudaProfilerApi or nvtx")
        if "mpi" in self.trace and not self.mpi_impl:
            raise ValueError("trace 'mpi' needs mpi_impl: openmpi or mpich")

    def argv(self) -> list[str]:
        """The `nsys profile` options (without -o), in nsys' own spelling."""
        args = [f"--trace={','.join(self.trace)}", f"--capture-range={self.capture_range}"]
        for field, flag in NSYS_FLAGS.items():
            value = getattr(self, field)
            if value is not None:
                args.append(f"{flag}={str(value).lower() if isinstance(value, bool) else value}")
        if self.capture_range == "nvtx":
            # torch.cuda.nvtx (and most Python NVTX) push unregistered strings, which nsys's NVTX
            # capture ignores unless this is set in the profiled process
            args.append("--env-var=NSYS_NVTX_PROFILER_REGISTER_ONLY=0")
        if self.export_sqlite:
            args.append("--export=sqlite")
        return [*args, "--force-overwrite=true", *self.extra_args]


#: Sections asked for when an experiment names neither `set` nor `sections`: those that fill
#: Echo's kernel metric table (hpcprof.analysis.ncu.metrics.ECHO_SECTION_IDS).
DEFAULT_NCU_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis")


def check_set_name(value: str | None) -> None:
    """ncu --set; None passes."""
    if value is not None and not re.fullmatch(r"[A-Za-z0-9_\-]+", value):
        raise ValueError("set must be a section-set name such as basic, detailed, full or roofline")


def check_identifiers(value: list[str]) -> None:
    """ncu section and metric identifiers."""
    for item in value:
        if not re.fullmatch(r"[A-Za-z0-9_.:\-]+", item):
            raise ValueError(f"{item!r} is not a section or metric identifier")


class NcuOptions(Model):
    """`ncu` options."""

    set: str | None = None                      # basic | detailed | full | roofline | ...
    sections: list[str] = []
    metrics: list[str] = []
    kernel_name: str | None = None              # name, or regex:EXPR
    kernel_name_base: Literal["function", "demangled", "mangled"] | None = None
    launch_skip: Annotated[int, Meta(ge=0)] | None = None
    launch_count: Annotated[int, Meta(ge=1)] | None = None
    nvtx_include: list[str] = []
    replay_mode: Literal["kernel", "application", "range", "app-range"] | None = None
    target_processes: Literal["all", "application-only"] | None = None
    profile_from_start: bool = True
    extra_args: list[str] = []

    def __post_init__(self) -> None:
        run_checks(self, {"set": check_set_name, "sections": check_identifiers, "metrics": check_identifiers})

    def argv(self) -> list[str]:
        """The `ncu` options (without -o)."""
        args: list[str] = []
        if self.set:
            args += ["--set", self.set]
        for section in self.sections or ([] if self.set else DEFAULT_NCU_SECTIONS):
            args += ["--section", section]
        if self.metrics:
            args += ["--metrics", ",".join(self.metrics)]
        if self.kernel_name_base:
            args += ["--kernel-name-base", self.kernel_name_base]
        if self.kernel_name:
            args += ["--kernel-name", self.kernel_name]
        if self.launch_skip is not None:
            args += ["--launch-skip", str(self.launch_skip)]
        if self.launch_count is not None:
            args += ["--launch-count", str(self.launch_count)]
        if self.nvtx_include:
            args.append("--nvtx")
            for rule in self.nvtx_include:
                args += ["--nvtx-include", rule]
        if self.replay_mode:
            args += ["--replay-mode", self.replay_mode]
        if self.target_processes:
            args += ["--target-processes", self.target_processes]
        if not self.profile_from_start:
            args += ["--profile-from-start", "off"]
        return [*args, "-f", *self.extra_args]


class TorchOptions(Model):
    """torch.profiler schedule and switches (the workload reads them from the environment)."""

    wait: Annotated[int, Meta(ge=0)] = 1
    warmup: Annotated[int, Meta(ge=0)] = 1
    active: Annotated[int, Meta(ge=1)] = 3
    repeat: Annotated[int, Meta(ge=0)] = 1
    gzip: bool = False

    def schedule(self) -> str:
        return f"wait={self.wait},warmup={self.warmup},active={self.active},repeat={self.repeat}"


class WindowConfig(Model):
    """The measured window of a `command` workload (seqpar and ddp mark their own):
    `nvtx` names the NVTX range that spans one timed iteration (metrics are computed over its
    instances, projected onto GPU time); `opened_by_program` states that the program itself
    opens nsys's capture range (calls cudaProfilerStart/Stop, or pushes the `nvtx_capture` range)."""

    nvtx: str | None = None
    opened_by_program: bool = False

    def __post_init__(self) -> None:
        if self.nvtx is not None and not self.nvtx.strip():
            raise FieldError("nvtx", "nvtx must name an NVTX range, e.g. train_step")


class ProfileConfig(Model):
    """Which profiler wraps which ranks, with its options."""

    tool: Literal["nsys", "ncu", "torch", "none"] = "none"
    ranks: str | int | list[int] = "all"
    window: WindowConfig = msgspec.field(default_factory=WindowConfig)
    nsys: NsysOptions = msgspec.field(default_factory=NsysOptions)
    ncu: NcuOptions = msgspec.field(default_factory=NcuOptions)
    torch: TorchOptions = msgspec.field(default_factory=TorchOptions)

    def __post_init__(self) -> None:
        run_checks(self, {"ranks": RankSelection})

    @property
    def selection(self) -> RankSelection:
        return RankSelection(self.ranks)
