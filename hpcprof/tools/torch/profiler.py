"""torch.profiler: no program to start; the workload runs it (seqpar and ddp: hpcprof.workloads.timing;
a `command`: the optimizer step hook, over its window of steps) with the schedule the rank wrapper
exports, and writes one Kineto trace per rank (HTA's analyses, hpcprof.tools.torch.analysis)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from hpcprof.core.models import Model, given_fields
from hpcprof.tools.base import KernelTime, Launch, Profiler, Tables
from hpcprof.tools.torch import tables as tt


class TorchOptions(Model):
    """torch.profiler schedule and switches (the workload reads them from the environment)."""

    wait: Annotated[int, Meta(ge=0)] = 1
    warmup: Annotated[int, Meta(ge=0)] = 1
    active: Annotated[int, Meta(ge=1)] = 3
    repeat: Annotated[int, Meta(ge=0)] = 1
    gzip: bool = False
    #: opt-in recorders, each costly (docs/user-guide/report.md's table): operator input shapes, Python
    #: stacks, tensor allocations and frees
    record_shapes: bool = False
    with_stack: bool = False
    profile_memory: bool = False

    def schedule(self) -> str:
        return f"wait={self.wait},warmup={self.warmup},active={self.active},repeat={self.repeat}"


def check(options: TorchOptions, workload: str, window: Any) -> tuple[str, str] | None:
    """On a `command` whose optimizer step hook drives torch.profiler (profile.window.auto), the
    window's steps are the schedule: only `warmup` (taken from the skipped steps) applies."""
    given = sorted(given_fields(options) & {"wait", "active", "repeat"})
    if not given or not window.hooked(workload) or window.opened_by_program:
        return None
    return (f"profile.torch.{given[0]}", "on a command the step hook's window is torch.profiler's schedule "
            "(profile.window.skip_steps and steps); drop it, or set profile.window.auto: false")


def launch(options: TorchOptions, program: str) -> Launch:
    """The command itself, with the schedule, trace compression and opt-in recorders in its environment."""
    return Launch([], env={"HPCPROF_TORCH_SCHEDULE": options.schedule(),
                           "HPCPROF_TORCH_GZIP": "1" if options.gzip else "0",
                           "HPCPROF_TORCH_SHAPES": "1" if options.record_shapes else "0",
                           "HPCPROF_TORCH_STACK": "1" if options.with_stack else "0",
                           "HPCPROF_TORCH_MEMORY": "1" if options.profile_memory else "0"})


PROFILER = Profiler(
    "torch",
    suffixes=(".pt.trace.json", ".pt.trace.json.gz"),
    options=TorchOptions, launch=launch, check=check,
    collector="hpcprof.tools.torch.analysis.collect:TorchCollector",
    catalog=tt.CATALOG,
    tables=Tables(iterations=tt.ITERATIONS.key, window=tt.WINDOW.key,
                  critical_path=tt.CRITICAL_PATH.key, kernels=tt.WINDOW_KERNELS.key,
                  busbw=tt.BUSBW.key),
    kernel_time=KernelTime("name", "total_ns", 1e6),
    metrics=("hpcprof.tools.torch.analysis.headline:torch_metrics",),
    figures="hpcprof.tools.torch.report.figures:torch_figures",
    diff="hpcprof.tools.torch.analysis.diff:diff_profile",
    api=("hpcprof.tools.torch.analysis.api:load_traces", "hpcprof.tools.torch.analysis.api:Traces"))
