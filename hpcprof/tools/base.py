"""The parts of a profiler's entry in the table (hpcprof.profilers): what a tool declares."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from hpcprof.core.catalog import ToolCatalog, table_name


class Launch(NamedTuple):
    """How the rank wrapper starts a profiled rank: `env` exported, then `exec ARGV [OUTPUT
    "$HPCPROF_PROFILE_DIR/rank$N"] COMMAND...` (`argv` empty: the command itself, e.g. torch.profiler
    inside the workload; `output` "": the tool takes no output option)."""

    argv: list[str]
    output: str = ""
    env: dict[str, str] = {}


class Tables(NamedTuple):
    """A tool's result tables by role: the names its collector gives them (written as
    `<tool>_<name>`), None where it has none."""

    iterations: str | None = None       # per rank and iteration of the window: rank, iteration, start_ns, end_ns
    window: str | None = None           # per rank: the measured window (duration_ns, iterations)
    critical_path: str | None = None    # per iteration: the rank the others waited for, in which collective
    kernels: str | None = None          # per rank and kernel: its GPU time
    collectives: str | None = None      # per rank and collective: its NCCL time
    busbw: str | None = None            # per rank, process group, collective and message size: its bus bandwidth


class KernelTime(NamedTuple):
    """Where the kernels table (Tables.kernels) has a kernel's name and its GPU time, and that
    time's units per millisecond (the top kernels of a run's headline)."""

    name: str
    time: str
    per_ms: float


#: (options, site's program) -> how a profiled rank starts
Launcher = Callable[[Any, str], Launch]
#: (options, workload kind, profile.window) -> (field, problem) of an experiment point, None when it is fine
PointCheck = Callable[[Any, str, Any], "tuple[str, str] | None"]
#: options -> None where the tool records from the start, else the options it starts with when the
#: optimizer step hook opens and closes its capture range (cudaProfilerStart/Stop) around the window
CaptureHook = Callable[[Any], Any]


class Profiler(NamedTuple):
    """One profiling tool (the module docstring says what each part is for)."""

    name: str
    program: str | None = None                  # executable the rank wrapper starts (None: none to start)
    paths_key: str | None = None                # the site's `paths.<key>` naming the program there
    suffixes: tuple[str, ...] = ()              # its per-rank files under profiles/<name>/, what it writes first
    options: type | None = None                 # the model of `profile.<name>:` (None: it takes none)
    launch: Launcher | None = None              # how a profiled rank starts (None: not profiled)
    check: PointCheck | None = None             # its check of an experiment point
    capture: CaptureHook | None = None          # its capture hook (None: it records from the start)
    collector: str | None = None                # "module:Class" of its ToolCollector (None: nothing to collect)
    tables: Tables = Tables()                   # its result tables by role
    catalog: ToolCatalog = ToolCatalog()        # its result tables declared, and their part in the metrics
    kernel_time: KernelTime | None = None       # the kernels table's name and time columns
    metrics: tuple[str, ...] = ()               # "module:function"s (tables -> headline metrics)
    figures: str | None = None                  # "module:function" (RunInfo -> the report's figures of a run)
    diff: str | None = None                     # "module:function" (files, window, include_last_step -> the
                                                # Profile `hpcprof diff` compares: hpcprof.analysis.diff.profiles)
    api: tuple[str, ...] = ()                   # "module:attribute"s hpcprof.api offers under their own names

    def table(self, role: str) -> str | None:
        """The result table of `role` (a field of Tables) as written, `<tool>_<name>`; None where it has none."""
        name: str | None = getattr(self.tables, role)
        return table_name(self.name, name) if name else None

    def program_in(self, paths: Mapping[str, Any]) -> str | None:
        """The program on a site whose `paths:` are `paths` (its own key, else `program`); None: none."""
        if self.program is None:
            return None
        return str(paths.get(self.paths_key, self.program)) if self.paths_key else self.program
