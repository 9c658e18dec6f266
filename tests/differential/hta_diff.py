"""Differential run: generated Kineto trace sets through HTA 0.5.0 and hpcprof's five analyses.

`python -m tests.differential.hta_diff N` prints compared/identical counts and the first
differences. Used by tests/test_trace_differential.py.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from .kineto_gen import generate


def _same(ours: pd.DataFrame, theirs: pd.DataFrame, columns: list[str], keys: list[str]) -> str | None:
    """None when equal at HTA's rounding (values as HTA printed them), else the first difference."""
    a = ours[columns].sort_values(keys, kind="stable").reset_index(drop=True)
    b = theirs[columns].sort_values(keys, kind="stable").reset_index(drop=True)
    try:
        pd.testing.assert_frame_equal(a, b, check_dtype=False, check_exact=False, rtol=1e-9, atol=1e-9)
    except AssertionError as exc:
        return str(exc).replace("\n", " ")[:300]
    return None


def analyses(directory: Path) -> dict[str, Callable[[], str | None]]:
    """analysis name -> a check comparing HTA's result with hpcprof's on the set in `directory`."""
    from hta.trace_analysis import TraceAnalysis

    from hpcprof.analysis.trace import analyses as A
    from hpcprof.analysis.trace.load import load_traces

    traces, errors = load_traces([directory], workers=1)
    assert not errors, errors
    hta = TraceAnalysis(trace_dir=str(directory))
    ranks = [t.rank for t in traces]

    def temporal() -> str | None:
        theirs = hta.get_temporal_breakdown(visualize=False)
        return _same(A.temporal_breakdown(traces), theirs, list(theirs.columns), ["rank"])

    def idle() -> str | None:
        theirs = hta.get_idle_time_breakdown(ranks=ranks, visualize=False)[0]
        return _same(A.idle_time_breakdown(traces), theirs, list(theirs.columns),
                     ["rank", "stream", "idle_category"])

    def overlap() -> str | None:
        theirs = hta.get_comm_comp_overlap(visualize=False)
        return _same(A.comm_comp_overlap(traces), theirs, list(theirs.columns), ["rank"])

    def launch() -> str | None:
        per_rank = hta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        theirs = pd.concat([df.assign(rank=r) for r, df in per_rank.items()], ignore_index=True)
        cols = ["rank", "correlation", "cpu_duration", "gpu_duration", "launch_delay"]
        return _same(A.kernel_launch_stats(traces), theirs, cols, ["rank", "correlation"])

    def kernels() -> str | None:
        by_type, by_kernel = hta.get_gpu_kernel_breakdown(visualize=False)
        by_type = by_type[by_type["sum"] > 0]
        diff = _same(A.kernel_type_breakdown(traces), by_type, list(by_type.columns), ["kernel_type"])
        ours = A.kernel_breakdown(traces)
        return diff or _same(ours, by_kernel, list(ours.columns), ["kernel_type", "rank", "name"])

    return {"temporal": temporal, "idle": idle, "overlap": overlap, "launch": launch, "kernels": kernels}


def compare(seeds: range) -> tuple[int, int, int, list[str]]:
    """(compared, identical, HTA failures, differences) over the trace sets of `seeds`."""
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    compared = failed = 0
    diffs: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hta-diff-") as tmp:
        for seed in seeds:
            for name, check in analyses(generate(seed, Path(tmp) / str(seed))).items():
                try:
                    diff = check()
                except AssertionError:             # HTA's own assertions (negative durations)
                    failed += 1
                    continue
                compared += 1
                if diff:
                    diffs.append(f"seed {seed} {name}: {diff}")
    return compared, compared - len(diffs), failed, diffs


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    compared, identical, failed, diffs = compare(range(n))
    print(f"HTA 0.5.0 differential: {n} trace sets, {compared} analyses compared, {identical} identical, "
          f"{failed} not compared (HTA assertion)")
    for d in diffs[:30]:
        print(d)


if __name__ == "__main__":
    main()
