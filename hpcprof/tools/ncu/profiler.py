"""Nsight Compute (`ncu`): its options, how it wraps a rank, and where its results are (Echo's
kernel metric table, hpcprof.tools.ncu.analysis)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from msgspec import Meta

from hpcprof.core.models import Model, run_checks
from hpcprof.tools.base import Launch, Profiler, Tables
from hpcprof.tools.ncu import tables as nc

#: Sections asked for when an experiment names neither `set` nor `sections`: those that fill
#: Echo's kernel metric table (hpcprof.tools.ncu.analysis.metrics.ECHO_SECTION_IDS).
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


def launch(options: NcuOptions, program: str) -> Launch:
    """`ncu OPTIONS -o PROFILE_DIR/rankN COMMAND`."""
    return Launch([program, *options.argv()], "-o")


def capture(options: NcuOptions) -> NcuOptions | None:
    """Under `profile_from_start: false`, the options as they are."""
    return None if options.profile_from_start else options


PROFILER = Profiler(
    "ncu", program="ncu", paths_key="ncu",
    suffixes=(".ncu-rep", ".csv"),                  # a report, or its CSV export
    options=NcuOptions, launch=launch, capture=capture,
    collector="hpcprof.tools.ncu.analysis.collect:NcuCollector",
    catalog=nc.CATALOG,
    tables=Tables(kernels=nc.METRICS.key),
    figures="hpcprof.tools.ncu.report.figures:ncu_figures")
