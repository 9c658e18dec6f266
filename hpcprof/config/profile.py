"""Profile settings of an experiment: tool, rank selection and tool options.

Everything here is validated when the experiment is loaded, so a wrong option fails at render
time on the login node, not an hour later in the queue.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from hpcprof.config.site import Strict
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


class NsysOptions(Strict):
    """`nsys profile` options."""

    trace: list[str] = ["cuda", "nvtx", "osrt"]
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

    @field_validator("trace")
    @classmethod
    def _known_traces(cls, value: list[str]) -> list[str]:
        for item in value:
            if item not in NSYS_TRACES:
                raise ValueError(f"unknown nsys trace {item!r}; allowed: {', '.join(NSYS_TRACES)}")
        return value

    @field_validator("capture_range_end")
    @classmethod
    def _range_end(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"stop|stop-shutdown|none|repeat(:\d+)?|repeat-shutdown:\d+", value):
            raise ValueError("capture_range_end must be stop, stop-shutdown, none, repeat[:N] or repeat-shutdown:N")
        return value

    @field_validator("nvtx_capture")
    @classmethod
    def _nvtx_capture(cls, value: str | None) -> str | None:
        if value is not None and not SAFE_TOKEN.fullmatch(value.replace(" ", "_")):
            raise ValueError("nvtx_capture must be RANGE or RANGE@DOMAIN")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> NsysOptions:
        if self.capture_range == "nvtx" and not self.nvtx_capture:
            raise ValueError("capture_range nvtx needs nvtx_capture (RANGE or RANGE@DOMAIN)")
        if self.nvtx_capture and self.capture_range != "nvtx":
            raise ValueError("nvtx_capture needs capture_range: nvtx")
        if self.capture_range_end and self.capture_range == "none":
            raise ValueError("capture_range_end needs capture_range cudaProfilerApi or nvtx")
        if "mpi" in self.trace and not self.mpi_impl:
            raise ValueError("trace 'mpi' needs mpi_impl: openmpi or mpich")
        return self

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


class NcuOptions(Strict):
    """`ncu` options."""

    set: str | None = None                      # basic | detailed | full | roofline | ...
    sections: list[str] = []
    metrics: list[str] = []
    kernel_name: str | None = None              # name, or regex:EXPR
    kernel_name_base: Literal["function", "demangled", "mangled"] | None = None
    launch_skip: int | None = Field(None, ge=0)
    launch_count: int | None = Field(None, ge=1)
    nvtx_include: list[str] = []
    replay_mode: Literal["kernel", "application", "range", "app-range"] | None = None
    target_processes: Literal["all", "application-only"] | None = None
    profile_from_start: bool = True
    extra_args: list[str] = []

    @field_validator("set")
    @classmethod
    def _set_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_\-]+", value):
            raise ValueError("set must be a section-set name such as basic, detailed, full or roofline")
        return value

    @field_validator("sections", "metrics")
    @classmethod
    def _identifiers(cls, value: list[str]) -> list[str]:
        for item in value:
            if not re.fullmatch(r"[A-Za-z0-9_.:\-]+", item):
                raise ValueError(f"{item!r} is not a section or metric identifier")
        return value

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


class TorchOptions(Strict):
    """torch.profiler schedule and switches (the workload reads them from the environment)."""

    wait: int = Field(1, ge=0)
    warmup: int = Field(1, ge=0)
    active: int = Field(3, ge=1)
    repeat: int = Field(1, ge=0)
    gzip: bool = False

    def schedule(self) -> str:
        return f"wait={self.wait},warmup={self.warmup},active={self.active},repeat={self.repeat}"


class WindowConfig(Strict):
    """The measured window of a `command` workload (seqpar and ddp mark their own):
    `nvtx` names the NVTX range that spans one timed iteration (metrics are computed over its
    instances, projected onto GPU time); `opened_by_program` states that the program itself
    opens nsys's capture range (calls cudaProfilerStart/Stop, or pushes the `nvtx_capture` range)."""

    nvtx: str | None = None
    opened_by_program: bool = False

    @field_validator("nvtx")
    @classmethod
    def _range_name(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("nvtx must name an NVTX range, e.g. train_step")
        return value


class ProfileConfig(Strict):
    """Which profiler wraps which ranks, with its options."""

    tool: Literal["nsys", "ncu", "torch", "none"] = "none"
    ranks: str | int | list[int] = "all"
    window: WindowConfig = WindowConfig()
    nsys: NsysOptions = NsysOptions()
    ncu: NcuOptions = NcuOptions()
    torch: TorchOptions = TorchOptions()

    @field_validator("ranks")
    @classmethod
    def _selection(cls, value: str | int | list[int]) -> str | int | list[int]:
        RankSelection(value)
        return value

    @property
    def selection(self) -> RankSelection:
        return RankSelection(self.ranks)
