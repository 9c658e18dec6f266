"""Nsight Systems (`nsys profile`): its options, how it wraps a rank, and where its results are.

Its collector (hpcprof.tools.nsys.analysis.collect) exports each .nsys-rep to SQLite with the site's nsys
and analyses the exports; Echo's slowdown of a DDP sweep is one of its run steps."""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from hpcprof.core.models import Model, run_checks
from hpcprof.tools.base import KernelTime, Launch, Profiler, Tables
from hpcprof.tools.nsys import tables as nt

NSYS_TRACES = ("cuda", "nvtx", "osrt", "cublas", "cublas-verbose", "cudnn", "cusparse", "cusolver",
               "mpi", "ucx", "oshmem", "openacc", "openmp", "opengl", "vulkan", "nvvideo",
               "python-gil", "syscall", "none")
#: optional NsysOptions fields -> `nsys profile` flags, in the order they are written
NSYS_FLAGS = {"nvtx_capture": "--nvtx-capture", "capture_range_end": "--capture-range-end",
              "stats": "--stats", "sample": "--sample", "cpuctxsw": "--cpuctxsw", "gpuctxsw": "--gpuctxsw",
              "cuda_graph_trace": "--cuda-graph-trace", "mpi_impl": "--mpi-impl",
              "python_sampling": "--python-sampling", "cuda_event_trace": "--cuda-event-trace"}
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
    """`nsys profile` options. The defaults trace CUDA and NVTX, with no CPU sampling or context
    switch tracing (hpcprof reads neither; its own stack sampler names idle causes): OS runtime
    tracing (`osrt`), sampling and backtraces are opt-in, each for its cost (docs/user-guide/report.md).
    `None` leaves a flag out: nsys's own default (CUDA event tracing: nsys before 2024 has no flag)."""

    trace: list[str] = msgspec.field(default_factory=lambda: ["cuda", "nvtx"])
    capture_range: Literal["none", "cudaProfilerApi", "nvtx"] = "none"
    nvtx_capture: str | None = None
    capture_range_end: str | None = None
    stats: bool = False
    sample: Literal["none", "cpu", "process-tree", "system-wide"] | None = "none"
    cpuctxsw: Literal["none", "process-tree", "system-wide"] | None = "none"
    gpuctxsw: bool | None = None
    cuda_graph_trace: Literal["graph", "node"] | None = None
    mpi_impl: Literal["openmpi", "mpich"] | None = None
    python_sampling: bool | None = None
    cuda_event_trace: bool | None = None
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


def launch(options: NsysOptions, program: str) -> Launch:
    """`nsys profile OPTIONS -o PROFILE_DIR/rankN COMMAND`."""
    return Launch([program, "profile", *options.argv()], "-o")


def check(options: NsysOptions, workload: str, window: Any) -> tuple[str, str] | None:
    """A capture range records only what the program opens: seqpar and ddp open it around their timed
    iterations, the step hook a `command`'s (profile.window.auto), else the program must say it does
    (profile.window.opened_by_program)."""
    if options.capture_range == "none" or workload != "command" or window.opened_by_program \
            or (window.hooked(workload) and options.capture_range == "cudaProfilerApi"):
        return None
    return ("profile.window.opened_by_program",
            f"capture_range {options.capture_range} records only what the program opens; set it to true if the "
            "program calls cudaProfilerStart/Stop (or pushes the nvtx_capture range), else use capture_range: none "
            "(or cudaProfilerApi, which the step hook of profile.window.auto opens)")


def capture(options: NsysOptions) -> NsysOptions | None:
    """Under `capture_range: cudaProfilerApi`, the options with `capture_range_end: stop` where none
    is given (nsys's own default, stop-shutdown, would end the program when the window closes)."""
    if options.capture_range != "cudaProfilerApi":
        return None
    return options if options.capture_range_end is not None else msgspec.structs.replace(options, capture_range_end="stop")


PROFILER = Profiler(
    "nsys", program="nsys", paths_key="nsys",
    suffixes=(".nsys-rep", ".qdrep", ".sqlite"),     # a report, the old name of one, its SQLite export
    options=NsysOptions, launch=launch, check=check, capture=capture,
    collector="hpcprof.tools.nsys.analysis.collect:NsysCollector",
    catalog=nt.CATALOG,
    tables=Tables(iterations=nt.ITERATIONS.key, window=nt.WINDOW.key, critical_path=nt.CRITICAL_PATH.key,
                  kernels=nt.KERNELS.key, collectives=nt.NCCL.key, busbw=nt.BUSBW.key),
    kernel_time=KernelTime("name", "total_ns", 1e6),
    metrics=("hpcprof.tools.nsys.analysis.headline:nsys_metrics", "hpcprof.analysis.summary:slowdown_metrics"),
    figures="hpcprof.tools.nsys.report.figures:nsys_figures",
    diff="hpcprof.tools.nsys.analysis.diff:diff_profile",
    api=("hpcprof.tools.nsys.analysis.api:nsys_reports", "hpcprof.tools.nsys.analysis.api:nsys_report"))
