"""torch.profiler: no program to start; the workload runs it (hpcprof.workloads.timing) with the
schedule the rank wrapper exports, and writes one Kineto trace per rank (HTA's analyses,
hpcprof.analysis.trace)."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from hpcprof import catalog as c
from hpcprof.models import Model
from hpcprof.profilers.base import KernelTime, Launch, Profiler, Tables


class TorchOptions(Model):
    """torch.profiler schedule and switches (the workload reads them from the environment)."""

    wait: Annotated[int, Meta(ge=0)] = 1
    warmup: Annotated[int, Meta(ge=0)] = 1
    active: Annotated[int, Meta(ge=1)] = 3
    repeat: Annotated[int, Meta(ge=0)] = 1
    gzip: bool = False

    def schedule(self) -> str:
        return f"wait={self.wait},warmup={self.warmup},active={self.active},repeat={self.repeat}"


def launch(options: TorchOptions, program: str) -> Launch:
    """The command itself, with the schedule and trace compression in its environment."""
    return Launch([], env={"HPCPROF_TORCH_SCHEDULE": options.schedule(),
                           "HPCPROF_TORCH_GZIP": "1" if options.gzip else "0"})


PROFILER = Profiler(
    "torch",
    suffixes=(".pt.trace.json", ".pt.trace.json.gz"),
    options=TorchOptions, launch=launch,
    collector="hpcprof.analysis.trace.collect:TorchCollector",
    tables=Tables(iterations=c.TORCH_ITERATIONS.key, window=c.TORCH_WINDOW.key,
                  critical_path=c.TORCH_CRITICAL_PATH.key, kernels=c.TORCH_KERNELS.key),
    kernel_time=KernelTime("name", "sum (us)", 1e3),
    metrics=("hpcprof.analysis.summary:torch_metrics",),
    figures="hpcprof.report.html:torch_figures")
