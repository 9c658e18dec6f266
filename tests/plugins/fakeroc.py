"""A fourth profiler, added the way a package of its own adds one (tests/test_profiler_extension.py):
its entry in the profiler table (PROFILER: the program, its per-rank CSV, how a rank starts under
it, its collector, its kernels table and headline metrics) and its collector, registered by one
entry point of the group `hpcprof.profilers` (`fakeroc = fakeroc:PROFILER`). Its program is the
executable `fakeroc` beside this file, a rocprof-like tracer that writes one CSV per rank."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprof.analysis.collector import Log, ReadTable, Reducer, ToolCollector
from hpcprof.profilers import KernelTime, Launch, Profiler, Tables

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.analysis.summary import Tables as RunTables
    from hpcprof.run.results import Metric


def launch(options: None, program: str) -> Launch:
    """`fakeroc -o PROFILE_DIR/rankN COMMAND` (it adds .csv)."""
    return Launch([program], "-o")


class FakerocCollector(ToolCollector):
    """fakeroc in `collect`: each rank's CSV as its kernels, then their totals per rank and kernel."""

    def analyse_file(self, path: Path, rank: int) -> dict[str, pd.DataFrame]:
        import pandas as pd

        trace = pd.read_csv(path)
        if list(trace.columns) != ["kernel", "start_ns", "end_ns"]:
            raise ValueError(f"{path.name}: not a fakeroc trace (columns {', '.join(map(str, trace.columns))})")
        return {"kernels": pd.DataFrame({"rank": rank, "name": trace["kernel"].astype(str),
                                         "start_ns": trace["start_ns"], "end_ns": trace["end_ns"],
                                         "duration_ns": trace["end_ns"] - trace["start_ns"]})}

    def reducers(self) -> Sequence[Reducer]:
        return (kernel_sum,)


def kernel_sum(read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
    """Per rank and kernel: total_ns and count."""
    kernels = read("kernels")
    if kernels is None:
        return {}
    log(f"fakeroc: {len(kernels)} kernel(s) on {kernels['rank'].nunique()} rank(s)")
    return {"kernel_sum": kernels.groupby(["rank", "name"], as_index=False).agg(
        total_ns=("duration_ns", "sum"), count=("duration_ns", "size"))}


def headline(tables: RunTables) -> list[Metric]:
    """GPU time per rank by kernel category (gpu.total, gpu.gemm, ...), as nsys's headline has it."""
    from hpcprof.analysis.summary import gpu_time_metrics

    sums = tables("fakeroc_kernel_sum")
    if sums is None or sums.empty:
        return []
    return gpu_time_metrics(sums["name"].astype(str), sums["total_ns"].astype(float) / 1e6, sums["rank"].nunique())


PROFILER = Profiler(
    "fakeroc", program=str(Path(__file__).with_name("fakeroc")), suffixes=(".csv",), launch=launch,
    collector="fakeroc:FakerocCollector", tables=Tables(kernels="kernel_sum"),
    kernel_time=KernelTime("name", "total_ns", 1e6), metrics=("fakeroc:headline",))
