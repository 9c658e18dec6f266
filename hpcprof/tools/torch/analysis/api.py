"""torch.profiler's part of hpcprof's Python API (hpcprof.api names it): load Kineto traces and run
HTA 0.5.0's analyses over them, each as a DataFrame or, with `plot=True`, a plotly figure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprof.core.errors import UserError

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from hpcprof.tools.torch.analysis.load import RankTrace

PathLike = str | Path


def _paths(paths: PathLike | Iterable[PathLike]) -> list[Path]:
    return [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]


@dataclass
class Traces:
    """torch.profiler traces of one run, one per rank (`load_traces`); the methods are HTA's
    TraceAnalysis analyses, for every rank unless `ranks` narrows them."""

    traces: list[RankTrace]
    skipped: list[str]      # one line per file that could not be used

    @property
    def ranks(self) -> list[int]:
        """The ranks loaded, in order."""
        return [t.rank for t in self.traces]

    def _of(self, ranks: Sequence[int] | None) -> list[RankTrace]:
        if ranks is None:
            return self.traces
        missing = sorted(set(ranks) - set(self.ranks))
        if missing:
            raise UserError(f"ranks {missing}: not among the loaded ranks {self.ranks}")
        return [t for t in self.traces if t.rank in set(ranks)]

    def temporal_breakdown(self, ranks: Sequence[int] | None = None, plot: bool = False) -> pd.DataFrame | go.Figure:
        """Idle, compute and non-compute GPU time per rank (HTA `get_temporal_breakdown`)."""
        from hpcprof.api import plots as api_plots
        from hpcprof.tools.torch.analysis.analyses import temporal_breakdown

        df = temporal_breakdown(self._of(ranks)).frame()
        return api_plots.temporal_breakdown(df) if plot else df

    def idle_time_breakdown(self, ranks: Sequence[int] | None = None, streams: Sequence[int] | None = None,
                            consecutive_kernel_delay: float = 30, show_idle_interval_stats: bool = False,
                            plot: bool = False) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame] | go.Figure:
        """GPU idle time per rank and stream by cause: host wait, kernel wait, other (HTA
        `get_idle_time_breakdown`; with `show_idle_interval_stats`, also the interval statistics,
        as the tuple HTA returns)."""
        from hpcprof.api import plots as api_plots
        from hpcprof.tools.torch.analysis.analyses import (
            idle_interval_stats,
            idle_time_breakdown,
        )

        traces = self._of(ranks)
        df = idle_time_breakdown(traces, streams, consecutive_kernel_delay).frame()
        if plot:
            return api_plots.idle_time_breakdown(df)
        if show_idle_interval_stats:
            return df, idle_interval_stats(traces, streams, consecutive_kernel_delay)
        return df

    def comm_comp_overlap(self, ranks: Sequence[int] | None = None, plot: bool = False) -> pd.DataFrame | go.Figure:
        """% of communication time overlapped by computation, per rank (HTA `get_comm_comp_overlap`)."""
        from hpcprof.api import plots as api_plots
        from hpcprof.tools.torch.analysis.analyses import comm_comp_overlap

        df = comm_comp_overlap(self._of(ranks)).frame()
        return api_plots.comm_comp_overlap(df) if plot else df

    def kernel_launch_stats(self, ranks: Sequence[int] | None = None, runtime_cutoff: float = 50,
                            launch_delay_cutoff: float = 100, plot: bool = False) -> pd.DataFrame | go.Figure:
        """CPU launch time, GPU time and launch delay of every kernel (HTA
        `get_cuda_kernel_launch_stats`, all ranks in one frame with a rank column)."""
        from hpcprof.api import plots as api_plots
        from hpcprof.tools.torch.analysis.analyses import kernel_launch_stats

        df = kernel_launch_stats(self._of(ranks), runtime_cutoff, launch_delay_cutoff).frame()
        return api_plots.kernel_launch_stats(df) if plot else df

    def gpu_kernel_breakdown(self, ranks: Sequence[int] | None = None, num_kernels: int = 10,
                             include_memory_kernels: bool = True, plot: bool = False
                             ) -> tuple[pd.DataFrame, pd.DataFrame] | go.Figure:
        """(time by kernel type, the longest kernels of each type per rank), HTA
        `get_gpu_kernel_breakdown`; `plot=True`: the kernel-type pie."""
        from hpcprof.api import plots as api_plots
        from hpcprof.tools.torch.analysis.analyses import (
            kernel_breakdown,
            kernel_type_breakdown,
        )

        traces = self._of(ranks)
        by_type = kernel_type_breakdown(traces, include_memory_kernels).frame()
        if plot:
            return api_plots.kernel_type_breakdown(by_type)
        return by_type, kernel_breakdown(traces, num_kernels, include_memory_kernels=include_memory_kernels).frame()


def load_traces(paths: PathLike | Iterable[PathLike], ranks: Sequence[int] | None = None,
                include_last_profiler_step: bool = False) -> Traces:
    """Load torch.profiler traces (`*.pt.trace.json[.gz]` or HTA's `*.json[.gz]`, directories
    expanded; HTA's `TraceAnalysis(trace_dir=...)`). Files that cannot be used are listed in
    `.skipped`; none usable is an error."""
    from hpcprof.tools.torch.analysis.load import load_traces as load

    traces, errors = load(_paths(paths), set(ranks) if ranks is not None else None, include_last_profiler_step)
    if not traces:
        raise UserError(f"no usable trace under {', '.join(map(str, _paths(paths)))}"
                        + (f": {errors[0]}" if errors else ""))
    return Traces(traces, errors)
