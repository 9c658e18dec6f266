"""Profile settings of an experiment: tool, rank selection and tool options.

The tools and their options models are those of the profiler table (hpcprof.profilers):
ProfileConfig holds one options field per built-in tool, made from the table.
Everything here is validated when the experiment is loaded, so a wrong option fails at render
time on the login node, not an hour later in the queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from msgspec import Meta

from hpcprof import profilers
from hpcprof.core.errors import shorten
from hpcprof.core.models import FieldError, Model, kind_of, run_checks
from hpcprof.run.ranks import RankSelection


class ToolName(str):
    """`profile.tool`: the name of a tool of the profiler table (built in, or added by an installed package)."""

    @classmethod
    def from_input(cls, value: Any) -> ToolName:
        if not isinstance(value, str):
            shown = kind_of(value) if isinstance(value, (dict, list)) or value is None else shorten(repr(value), 120)
            raise ValueError(f"expected text, got {shown}")
        if profilers.find(value) is None:
            raise ValueError(f"{shorten(repr(value), 120)} is not one of: {', '.join(map(repr, profilers.every()))}")
        return cls(value)


#: the NVTX ranges of the optimizer step hook (hpcprof/inject/_hpcprof_steps.py writes them): a step
#: of the window, and any other step
STEP_RANGE = "hpcprof:step"
UNMEASURED_STEP_RANGE = "hpcprof:step-unmeasured"


class WindowConfig(Model):
    """The measured window of a `command` workload (seqpar and ddp mark their own).

    With `auto` (the default) hpcprof's start-up hook makes every optimizer step of a Python
    program a step (hpcprof.inject._hpcprof_steps): the window is steps `skip_steps`+1 ..
    `skip_steps`+`steps`, marked as NVTX ranges `hpcprof:step`, opening nsys's `cudaProfilerApi`
    capture range (ncu's with `profile_from_start: false`) and driving torch.profiler's schedule
    there, each step's time recorded per rank. `nvtx` names the NVTX range that spans one timed
    iteration of a program that marks its own (metrics are computed over its instances, projected
    onto GPU time); `opened_by_program` states that the program itself opens the capture range
    (calls cudaProfilerStart/Stop, pushes the `nvtx_capture` range, runs its own torch.profiler):
    the hook then only marks and times the steps."""

    auto: bool = True               # the optimizer step hook on a `command` (false: as without it)
    skip_steps: Annotated[int, Meta(ge=1, le=1_000_000)] = 5    # optimizer steps before the window (warm-up)
    steps: Annotated[int, Meta(ge=1, le=1_000_000)] = 10        # optimizer steps in the window
    nvtx: str | None = None
    opened_by_program: bool = False
    #: the stack sampler's interval over the window, in ms (hpcprof.inject._hpcprof_sampler: the
    #: lines behind the idle causes); 0 turns it off. Its cost is part of the profiler's slowdown.
    stack_sample_ms: Annotated[float, Meta(ge=0, le=1000)] = 5.0

    def __post_init__(self) -> None:
        if self.nvtx is not None and not self.nvtx.strip():
            raise FieldError("nvtx", "nvtx must name an NVTX range, e.g. train_step")

    def hooked(self, workload: str) -> bool:
        """Whether the optimizer step hook runs in a rank of workload kind `workload`."""
        return self.auto and workload == "command"


class ProfileFields(Model):
    """ProfileConfig's fields before the tools' options: which profiler wraps which ranks, over which window."""

    tool: ToolName = ToolName("none")
    ranks: str | int | list[int] = "all"
    window: WindowConfig = msgspec.field(default_factory=WindowConfig)
    memory: bool = False    # a `command` on CUDA: PyTorch's memory history over the window, a snapshot per rank


if TYPE_CHECKING:
    ToolOptions = ProfileFields
else:
    #: ProfileFields, then one field per built-in tool that takes options (`nsys:`, `ncu:`, `torch:`),
    #: named for it, of its options model, in the registry's order (hpcprof.profilers.BUILTIN)
    ToolOptions = msgspec.defstruct(
        "ToolOptions", [(name, tool.options, msgspec.field(default_factory=tool.options))
                        for name, tool in profilers.BUILTIN.items() if tool.options is not None],
        bases=(ProfileFields,), module=__name__)


class ProfileConfig(ToolOptions):
    """Which profiler wraps which ranks, with its options."""

    #: an unprofiled run of the same workload in the same job, before the profiled one, over the same
    #: ranks and launcher: the baseline of the profiler's slowdown where no step of the profiled process
    #: is unprofiled (nsys, ncu). A `command`'s is ended by the step hook after its window (it needs
    #: `window.auto`); seqpar and ddp run their whole loop and write their results into
    #: `results/reference/`. Default (null): on under nsys and ncu (a `command`: where the hook runs);
    #: nothing under `tool: none`.
    reference: bool | None = None

    def __post_init__(self) -> None:
        run_checks(self, {"ranks": RankSelection})

    def references(self, workload: str) -> bool:
        """Whether the job runs the unprofiled reference (see `reference`) for workload kind `workload`."""
        if self.tool == "none" or (workload == "command" and not self.window.hooked(workload)):
            return False
        return self.reference if self.reference is not None else self.tool in ("nsys", "ncu")

    @property
    def selection(self) -> RankSelection:
        return RankSelection(self.ranks)

    @property
    def options(self) -> Any:
        """The options block of its tool (`nsys:`, ...); None for a tool that takes none."""
        return getattr(self, self.tool) if profilers.get(self.tool).options is not None else None
