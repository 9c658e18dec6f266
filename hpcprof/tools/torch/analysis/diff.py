"""`hpcprof diff`'s reading of Kineto traces (hpcprof.analysis.diff.profiles says what a Profile
holds): the window of trace/window.py, each GPU operation in the iteration its launch falls in."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hpcprof.analysis.diff.profiles import (
    ITERATION_COLUMNS,
    SAMPLE_COLUMNS,
    DiffInputError,
    Profile,
    capture_iterations,
    iteration_of,
    samples_of,
)

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.tools.torch.analysis.load import RankTrace


def _trace_rank(trace: RankTrace, spec: str) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """(window label, iterations, samples) of one rank's trace."""
    import numpy as np
    import pandas as pd

    from hpcprof.analysis.categories import run_categories
    from hpcprof.tools.torch.analysis.steps import WORK
    from hpcprof.tools.torch.analysis.window import CAPTURE, window_iterations

    gpu = trace.gpu.take(np.isin(trace.gpu.values("cat").astype(str), WORK))
    ts, end = gpu["ts"], gpu["end"]
    rank = np.full(len(gpu), trace.rank, dtype=np.int64)
    label, steps = (CAPTURE, pd.DataFrame()) if spec == "capture" else window_iterations(trace)
    if len(steps):
        launched = np.isin(gpu["correlation"], trace.cpu["correlation"])   # in the trace
        launch = np.where(launched, gpu["launch_ts"], np.nan)
        bounds = {"rank": np.full(len(steps), trace.rank), "iteration": steps["iteration"].to_numpy(np.int64)} | {
            c: steps[f"{c}_us"].to_numpy(np.float64) for c in ("cpu_start", "cpu_end", "start", "end")}
        iteration = iteration_of(rank, launch, ts, bounds)
        its = pd.DataFrame({"rank": trace.rank, "iteration": steps["iteration"].to_numpy(np.int64),
                            "gpu_ns": np.round((steps["end_us"] - steps["start_us"]).to_numpy() * 1000).astype(np.int64)})
    else:
        iteration = np.zeros(len(gpu), dtype=np.int64)
        its = capture_iterations(rank, ts * 1000, end * 1000)
        label = CAPTURE
    names = gpu.values("name").astype(str).astype(object)
    samples = samples_of(rank, iteration, names, names, np.round((end - ts) * 1000).astype(np.int64),
                         run_categories(trace.path).of(names))
    return label, its, samples


def diff_profile(files: list[Path], spec: str, include_last_step: bool = False) -> Profile:
    """The Profile of Kineto traces (one per rank); `nvtx:NAME` is refused (a trace has no NVTX ranges);
    a trace that cannot be read is a DiffInputError."""
    from hpcprof.tools.torch.analysis.stream import TraceError

    try:
        return _profile(files, spec, include_last_step)
    except TraceError as exc:
        raise DiffInputError(str(exc)) from None


def _profile(files: list[Path], spec: str, include_last_step: bool) -> Profile:
    """diff_profile, its trace errors raised."""
    import pandas as pd

    from hpcprof.tools.torch.analysis.load import load_traces

    if spec.startswith("nvtx:"):
        raise DiffInputError(f"{files[0]}: --window {spec}: a Kineto trace has no NVTX ranges; give --window auto "
                             "(its ProfilerSteps) or capture")
    # a GPU operation's time here is its duration: one shorter than a µs that crosses no µs boundary
    # gets 0, not HTA's negative duration on its µs grid
    traces, errors = load_traces(files, include_last_profiler_step=include_last_step, clamp_sub_us=True)
    if errors:
        raise DiffInputError(errors[0])
    parts = [_trace_rank(t, spec) for t in traces]
    return Profile(files, sorted({p[0] for p in parts}),
                   pd.concat([p[1] for p in parts], ignore_index=True)[ITERATION_COLUMNS],
                   pd.concat([p[2] for p in parts], ignore_index=True)[SAMPLE_COLUMNS])
