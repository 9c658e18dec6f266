"""Differential run: generated Kineto trace sets through HTA 0.5.0 and hpcprof's analyses, CSV
bytes compared (`DataFrame.to_csv(index=False)` on both sides).

`python -m tests.differential.hta_diff N` prints compared/identical counts and the first
differences. Used by tests/test_trace_differential.py.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

from .hta_reference import hta_trace_analysis
from .kineto_gen import generate


def _csv_diff(ours: pd.DataFrame, theirs: pd.DataFrame) -> str | None:
    """None when the two frames write the same CSV bytes (`to_csv(index=False)`, what `hpcprof
    trace ... --format csv` writes), else the first differing line of each."""
    a, b = ours.to_csv(index=False), theirs.to_csv(index=False)
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines(), strict=False)):
        if x != y:
            return f"line {i}: hpcprof {x!r} HTA {y!r}"
    return f"hpcprof {len(a.splitlines())} lines, HTA {len(b.splitlines())}"


def analyses(directory: Path) -> dict[str, Callable[[], str | None]]:
    """analysis name -> a check comparing HTA's CSV bytes with hpcprof's on the set in `directory`."""
    from hpcprof.tools.torch.analysis import analyses as A
    from hpcprof.tools.torch.analysis.load import load_traces

    traces, errors = load_traces([directory], workers=1)
    assert not errors, errors
    hta = hta_trace_analysis(directory)
    ranks = [t.rank for t in traces]

    @functools.cache
    def hta_idle() -> tuple[pd.DataFrame, pd.DataFrame]:
        """HTA's idle breakdown and interval stats, from one call (the breakdown does not depend
        on show_idle_interval_stats): its two analyses share it (CI time)."""
        return hta.get_idle_time_breakdown(ranks=ranks, visualize=False, show_idle_interval_stats=True)

    @functools.cache
    def hta_kernels() -> tuple[pd.DataFrame, pd.DataFrame]:
        """HTA's kernel-type and kernel breakdowns, from one call, shared likewise."""
        return hta.get_gpu_kernel_breakdown(visualize=False)

    def temporal() -> str | None:
        return _csv_diff(A.temporal_breakdown(traces).frame(), hta.get_temporal_breakdown(visualize=False))

    def idle() -> str | None:
        return _csv_diff(A.idle_time_breakdown(traces).frame(), hta_idle()[0])

    def idle_stats() -> str | None:
        """HTA keeps idle_category in the index, which to_csv(index=False) would drop: hpcprof
        writes it as a column, so HTA's frame is compared with its index as that column."""
        theirs = hta_idle()[1]
        ours = A.idle_interval_stats(traces)
        return _csv_diff(ours, theirs.reset_index()[list(ours.columns)])

    def overlap() -> str | None:
        return _csv_diff(A.comm_comp_overlap(traces).frame(), hta.get_comm_comp_overlap(visualize=False))

    def launch() -> str | None:
        """HTA gives one frame per rank; hpcprof one frame with a rank column and the outlier
        flags: each rank's rows, HTA's columns, byte for byte."""
        per_rank = hta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        ours = A.kernel_launch_stats(traces).frame()
        for rank, theirs in per_rank.items():
            diff = _csv_diff(ours[ours["rank"] == rank][list(theirs.columns)], theirs)
            if diff:
                return f"rank {rank}: {diff}"
        return None

    def queue() -> str | None:
        """HTA's summary has its (rank, stream) index and a column level ("queue_length") that
        to_csv(index=False) would drop: compared with them as columns."""
        theirs = hta.get_queue_length_summary(ranks=ranks)
        ours = A.queue_length_summary(traces)
        if theirs is None:
            return None if ours.empty else f"HTA no queue, hpcprof {len(ours)} rows"
        theirs.columns = theirs.columns.droplevel(0)
        return _csv_diff(ours, theirs.reset_index())

    def kernel_types() -> str | None:
        """HTA may list a type whose overlap lasts 0 µs (depending on its sort of equal times);
        hpcprof leaves those out: the other rows, byte for byte."""
        by_type = hta_kernels()[0]
        return _csv_diff(A.kernel_type_breakdown(traces).frame(), by_type[by_type["sum"] > 0])

    def kernels() -> str | None:
        return _csv_diff(A.kernel_breakdown(traces).frame(), hta_kernels()[1])

    return {"temporal": temporal, "idle": idle, "idle_stats": idle_stats, "overlap": overlap, "launch": launch,
            "queue": queue, "kernel_types": kernel_types, "kernels": kernels}


def _compare_seeds(seeds: list[int]) -> tuple[int, int, list[str]]:
    """(compared, HTA failures, differences) over the trace sets of `seeds`, in this process."""
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
    return compared, failed, diffs


def compare(seeds: range, workers: int | None = None) -> tuple[int, int, int, list[str]]:
    """(compared, identical, HTA failures, differences) over the trace sets of `seeds`, spread over
    `workers` spawned processes (default: the cores; spawned, not forked, as the test process has threads)."""
    workers = min(workers or os.cpu_count() or 1, len(seeds)) or 1
    chunks = [list(seeds[i::workers]) for i in range(workers)]
    if workers == 1:
        results = [_compare_seeds(chunks[0])]
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_compare_seeds, chunks))
    compared = sum(r[0] for r in results)
    diffs = sorted((d for r in results for d in r[2]), key=lambda d: int(d.split()[1]))
    return compared, compared - len(diffs), sum(r[1] for r in results), diffs


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    compared, identical, failed, diffs = compare(range(n))
    print(f"HTA 0.5.0 differential: {n} trace sets, {compared} analyses compared, {identical} identical, "
          f"{failed} not compared (HTA assertion)")
    for d in diffs[:30]:
        print(d)


if __name__ == "__main__":
    main()
