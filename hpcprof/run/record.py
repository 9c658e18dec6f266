"""The run record: a run's config.json (the resolved experiment and site, written by
hpcprof.render.job) read back once, typed. `read_record` is the one way it is read.

The record is versioned (`format: hpcprof.run`, `version`; runs written before version 1 have
neither and read as version 0) and read leniently: keys hpcprof does not read, of an older or a
newer hpcprof, are ignored (msgspec's default for a Struct), and a key an older run lacks takes
the default it had then. A record
that cannot be read is a one-line DamagedRunFile naming the file (hpcprof.run.rundir.read_config).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, TypeVar, overload

import msgspec

from hpcprof.run.rundir import DamagedRunFile, RunDir, damaged, read_config


class WorkloadRecord(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    args: dict[str, Any] = {}
    argv: list[str] = []


class WindowRecord(msgspec.Struct, frozen=True, kw_only=True):
    nvtx: str | None = None                 # the NVTX range of one iteration (a `command` workload's)
    auto: bool = False                      # the optimizer step hook ran (runs before it had none)
    opened_by_program: bool = False         # the program, not the hook, opens the capture range
    skip_steps: int = 0
    steps: int = 0

    def hooked(self, workload: str) -> bool:
        """Whether the optimizer step hook ran in the ranks (hpcprof.config.profile.WindowConfig.hooked)."""
        return self.auto and workload == "command"


class NsysRecord(msgspec.Struct, frozen=True, kw_only=True):
    capture_range: str = "none"
    trace: list[str] = msgspec.field(default_factory=lambda: ["cuda", "nvtx"])
    sample: str | None = None               # None: nsys's own default
    cpuctxsw: str | None = None
    cuda_event_trace: bool | None = None
    gpuctxsw: bool | None = None
    python_sampling: bool | None = None


class TorchRecord(msgspec.Struct, frozen=True, kw_only=True):
    record_shapes: bool = False
    with_stack: bool = False
    profile_memory: bool = False


class ProfileRecord(msgspec.Struct, frozen=True, kw_only=True):
    tool: str
    ranks: str | int | list[int] = "all"
    window: WindowRecord = msgspec.field(default_factory=WindowRecord)
    nsys: NsysRecord = msgspec.field(default_factory=NsysRecord)
    torch: TorchRecord = msgspec.field(default_factory=TorchRecord)
    memory: bool = False

    @property
    def observed(self) -> bool:
        """Whether anything observed the ranks: a profiler, or the memory history under `tool: none`."""
        return self.tool != "none" or self.memory


class ResourcesRecord(msgspec.Struct, frozen=True, kw_only=True):
    nodes: int = 1


class CategoryRuleRecord(msgspec.Struct, frozen=True, kw_only=True):
    category: str
    pattern: str


class AnalysisRecord(msgspec.Struct, frozen=True, kw_only=True):
    slowdown_match: str = "hpcprof"         # runs written before the `analysis:` block: hpcprof's
    kernel_categories: list[CategoryRuleRecord] = []
    scaling: str = "auto"                   # weak | strong | auto (runs written before it: auto)


class ExperimentRecord(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    workload: WorkloadRecord
    profile: ProfileRecord
    resources: ResourcesRecord = msgspec.field(default_factory=ResourcesRecord)
    analysis: AnalysisRecord = msgspec.field(default_factory=AnalysisRecord)
    gpu_affinity: str | None = None


class ToolPathsRecord(msgspec.Struct, frozen=True, kw_only=True):
    python: str = "python3"
    nsys: str = "nsys"
    ncu: str = "ncu"


class PeaksRecord(msgspec.Struct, frozen=True, kw_only=True):
    tflops: dict[str, float] = {}
    nvlink_GBps: float | None = None
    network_GBps: float | None = None
    source: str = ""


class LauncherRecord(msgspec.Struct, frozen=True, kw_only=True):
    kind: str = ""


class SiteRecord(msgspec.Struct, frozen=True, kw_only=True):
    name: str = ""
    launcher: LauncherRecord = msgspec.field(default_factory=LauncherRecord)
    gpu_affinity: str = "none"
    paths: ToolPathsRecord = msgspec.field(default_factory=ToolPathsRecord)
    peaks: PeaksRecord | None = None
    kernel_categories: list[CategoryRuleRecord] = []


class SweepPointRecord(msgspec.Struct, frozen=True, kw_only=True):
    index: int = 0
    params: dict[str, Any] = {}


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What collect, report, status and the schedulers read of a run's config.json."""

    format: str = ""
    version: int = 0
    run_id: str = ""
    experiment: ExperimentRecord
    site: SiteRecord
    sweep_point: SweepPointRecord
    ranks_per_node: int = 1
    world_size: int = 1
    walltime: str = ""                      # HH:MM:SS
    python: str = ""
    submit_dir: str | None = None
    profile_extension: str | None = None
    hpcprof_version: str = ""
    resubmit_of: str | None = None          # the run this one was resubmitted for

    @property
    def tool(self) -> str:
        """The profiler: nsys, ncu, torch or none."""
        return self.experiment.profile.tool

    @property
    def kind(self) -> str:
        """The workload kind: command, seqpar or ddp."""
        return self.experiment.workload.kind


class ResolvedRun(msgspec.Struct, frozen=True, kw_only=True):
    """The resolved experiment and site as the record keeps them whole: what `resubmit` renders the
    run from again (validated against today's config models there)."""

    experiment: dict[str, Any]
    site: dict[str, Any]
    sweep_point: SweepPointRecord
    submit_dir: str | None = None


R = TypeVar("R", RunRecord, ResolvedRun)


@overload
def read_record(source: RunDir | Path) -> RunRecord: ...
@overload
def read_record(source: RunDir | Path, model: type[R]) -> R: ...
def read_record(source: RunDir | Path, model: type[Any] = RunRecord) -> Any:
    """The record of a run (its RunDir, whose config.json is then read once for all its readers, or
    the path of a config.json) as `model`; DamagedRunFile (one line naming the file) when it cannot
    be read or holds a value of the wrong type."""
    path = source.path / "config.json" if isinstance(source, RunDir) else source
    data = source.config_json if isinstance(source, RunDir) else read_config(source)
    try:
        return msgspec.convert(data, model)
    except msgspec.ValidationError as exc:      # "Expected `int`, got `str` - at `$.world_size`"
        raise damaged(path, str(exc).replace("`$.", "`")[:160]) from None


def profile_record(path: Path) -> RunRecord | None:
    """The record of the run a profile file belongs to (`<run>/profiles/<tool>/` or
    `<run>/derived/<tool>/`; its config.json read once per change, not per rank file); None for a
    file outside a run or a record that cannot be read (collect names a damaged record itself)."""
    resolved = path.resolve()
    if len(resolved.parents) <= 2 or resolved.parent.parent.name not in ("profiles", "derived"):
        return None
    config = resolved.parents[2] / "config.json"
    try:
        return _record_as_of(config, config.stat().st_mtime_ns)
    except OSError:
        return None


@functools.lru_cache(maxsize=64)
def _record_as_of(config: Path, mtime_ns: int) -> RunRecord | None:
    try:
        return read_record(config)
    except DamagedRunFile:
        return None
