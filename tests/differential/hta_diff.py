"""Differential run: generated Kineto trace sets through HTA 0.5.0 and hpcprof's analyses, CSV
bytes compared (`DataFrame.to_csv(index=False)` on both sides).

`python -m tests.differential.hta_diff N` prints compared/identical counts and the first
differences (HTA run on every set); `python -m tests.differential.hta_diff --keep N OUT.json.xz`
writes HTA's texts of the sets of seeds 0..N-1 (tests/fixtures/hta/generated_hta_0.5.0.json.xz).
Used by tests/test_trace_differential.py.
"""

from __future__ import annotations

import functools
import json
import logging
import lzma
import multiprocessing
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from .hta_reference import hta_trace_analysis
from .kineto_gen import generate

#: the analyses compared, in order
NAMES = ("temporal", "idle", "idle_stats", "overlap", "launch", "queue", "kernel_types", "kernels")
#: HTA 0.5.0's texts of the generated sets of seeds 0..KEPT_SETS-1, kept (tests/fixtures/hta/, unpacked
#: by fixture_files); HTA runs again on every LIVE_EVERY-th set, whose texts must equal the kept ones
KEPT, KEPT_SETS, LIVE_EVERY = "generated_hta_0.5.0.json", 200, 8


def _text_diff(a: str, b: str) -> str | None:
    """None when hpcprof's CSV text `a` is HTA's `b`, else the first differing line of each."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines(), strict=False)):
        if x != y:
            return f"line {i}: hpcprof {x!r} HTA {y!r}"
    return f"hpcprof {len(a.splitlines())} lines, HTA {len(b.splitlines())}"


def hta_texts(directory: Path, ranks: list[int]) -> dict[str, str | None]:
    """HTA 0.5.0's CSV text (`to_csv(index=False)`) of each analysis of NAMES on the set in
    `directory`, shaped as hpcprof writes it (None where HTA's own assertion failed: negative
    durations). The idle breakdown and its interval stats come from one HTA call, as do the kernel
    type and kernel breakdowns (the second result does not depend on the option that adds it)."""
    hta = hta_trace_analysis(directory)

    @functools.cache
    def idle() -> tuple[pd.DataFrame, pd.DataFrame]:
        return hta.get_idle_time_breakdown(ranks=ranks, visualize=False, show_idle_interval_stats=True)

    @functools.cache
    def kernels() -> tuple[pd.DataFrame, pd.DataFrame]:
        return hta.get_gpu_kernel_breakdown(visualize=False)

    def idle_stats() -> str:
        """HTA keeps idle_category in the index: hpcprof writes it as a column, after rank and stream."""
        stats = idle()[1].reset_index()
        first = ["rank", "stream", "idle_category"]
        return stats[first + [c for c in stats.columns if c not in first]].to_csv(index=False)

    def launch() -> str:
        """HTA gives one frame per rank: each rank's block, `rank N` and its CSV."""
        per_rank = hta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        return "".join(f"rank {rank}\n{frame.to_csv(index=False)}" for rank, frame in per_rank.items())

    def queue() -> str:
        """HTA's (rank, stream) index and its column level ("queue_length") as hpcprof's columns;
        '' where HTA finds no queue."""
        summary = hta.get_queue_length_summary(ranks=ranks)
        if summary is None:
            return ""
        summary.columns = summary.columns.droplevel(0)
        return summary.reset_index().to_csv(index=False)

    def kernel_types() -> str:
        """HTA may list a type whose overlap lasts 0 µs (depending on its sort of equal times);
        hpcprof leaves those out: the other rows."""
        by_type = kernels()[0]
        return by_type[by_type["sum"] > 0].to_csv(index=False)

    makers: dict[str, Callable[[], str]] = {
        "temporal": lambda: hta.get_temporal_breakdown(visualize=False).to_csv(index=False),
        "idle": lambda: idle()[0].to_csv(index=False), "idle_stats": idle_stats,
        "overlap": lambda: hta.get_comm_comp_overlap(visualize=False).to_csv(index=False),
        "launch": launch, "queue": queue, "kernel_types": kernel_types,
        "kernels": lambda: kernels()[1].to_csv(index=False)}
    texts: dict[str, str | None] = {}
    for name in NAMES:
        try:
            texts[name] = makers[name]()
        except AssertionError:
            texts[name] = None
    return texts


def load(directory: Path) -> list[Any]:
    """hpcprof's traces of the set in `directory`."""
    from hpcprof.tools.torch.analysis.load import load_traces

    traces, errors = load_traces([directory], workers=1)
    assert not errors, errors
    return traces


def our_texts(traces: list[Any], theirs: dict[str, str | None]) -> dict[str, str]:
    """hpcprof's CSV text of each analysis HTA made (`theirs`), shaped as HTA's: the launch
    statistics per rank block with HTA's columns, an empty queue as ''."""
    from hpcprof.tools.torch.analysis import analyses as A

    def launch(hta_text: str) -> str:
        ours = A.kernel_launch_stats(traces).frame()
        blocks = []
        for block in hta_text.split("rank ")[1:]:
            rank, header = int(block.split("\n", 1)[0]), block.split("\n", 2)[1]
            blocks.append(f"rank {rank}\n" + ours[ours["rank"] == rank][header.split(",")].to_csv(index=False))
        return "".join(blocks)

    def queue() -> str:
        ours = A.queue_length_summary(traces)
        return "" if ours.empty else ours.to_csv(index=False)

    makers: dict[str, Callable[[str], str]] = {
        "temporal": lambda _: A.temporal_breakdown(traces).frame().to_csv(index=False),
        "idle": lambda _: A.idle_time_breakdown(traces).frame().to_csv(index=False),
        "idle_stats": lambda _: A.idle_interval_stats(traces).to_csv(index=False),
        "overlap": lambda _: A.comm_comp_overlap(traces).frame().to_csv(index=False),
        "launch": launch, "queue": lambda _: queue(),
        "kernel_types": lambda _: A.kernel_type_breakdown(traces).frame().to_csv(index=False),
        "kernels": lambda _: A.kernel_breakdown(traces).frame().to_csv(index=False)}
    return {name: makers[name](text) for name, text in theirs.items() if text is not None}


def analyses(directory: Path) -> dict[str, str | None]:
    """Each analysis's first difference between hpcprof and HTA 0.5.0 run now on the set in
    `directory` (None: the same CSV bytes); an analysis HTA fails on is left out."""
    traces = load(directory)
    theirs = hta_texts(directory, [t.rank for t in traces])
    return {name: _text_diff(text, theirs[name] or "") for name, text in our_texts(traces, theirs).items()}


def _compare_seeds(args: tuple[list[int], dict[str, dict[str, str | None]]]
                   ) -> tuple[int, int, list[str], int, list[str]]:
    """(compared, HTA failures, differences, kept texts checked, kept texts that differ) over the
    trace sets of `seeds`, in this process: against HTA run now on every LIVE_EVERY-th set or where
    none is kept (`kept`: by seed), else against its kept texts."""
    seeds, kept = args
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    compared = failed = checked = 0
    diffs: list[str] = []
    stale: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hta-diff-") as tmp:
        for seed in seeds:
            directory = generate(seed, Path(tmp) / str(seed))
            traces = load(directory)
            theirs = kept.get(str(seed))
            if theirs is None or seed % LIVE_EVERY == 0:
                now = hta_texts(directory, [t.rank for t in traces])
                if theirs is not None:
                    checked += len(NAMES)
                    stale += [f"seed {seed} {name}: HTA now {now[name]!r:.80} kept {theirs[name]!r:.80}"
                              for name in NAMES if now[name] != theirs[name]]
                theirs = now
            ours = our_texts(traces, theirs)
            failed += len(NAMES) - len(ours)
            compared += len(ours)
            diffs += [f"seed {seed} {name}: {diff}" for name, text in ours.items()
                      if (diff := _text_diff(text, theirs[name] or ""))]
    return compared, failed, diffs, checked, stale


def compare(seeds: range, kept: dict[str, dict[str, str | None]] | None = None,
            workers: int | None = None) -> tuple[int, int, int, list[str], int, list[str]]:
    """(compared, identical, HTA failures, differences, kept texts checked, kept texts that differ)
    over the trace sets of `seeds` (`kept`: HTA's kept texts by seed), spread over `workers` spawned
    processes (default: the cores; spawned, not forked, as the test process has threads)."""
    kept = kept or {}
    workers = min(workers or os.cpu_count() or 1, len(seeds)) or 1
    chunks = [(list(seeds[i::workers]), {str(s): kept[str(s)] for s in seeds[i::workers] if str(s) in kept})
              for i in range(workers)]
    if workers == 1:
        results = [_compare_seeds(chunks[0])]
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_compare_seeds, chunks))
    compared = sum(r[0] for r in results)
    diffs = sorted((d for r in results for d in r[2]), key=lambda d: int(d.split()[1]))
    return (compared, compared - len(diffs), sum(r[1] for r in results), diffs,
            sum(r[3] for r in results), [d for r in results for d in r[4]])


def keep(count: int, out: Path) -> None:
    """HTA 0.5.0's texts of the sets of seeds 0..count-1 as JSON, xz-compressed (KEPT's stored form)."""
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    texts = {}
    with tempfile.TemporaryDirectory(prefix="hta-keep-") as tmp:
        for seed in range(count):
            directory = generate(seed, Path(tmp) / str(seed))
            texts[str(seed)] = hta_texts(directory, [t.rank for t in load(directory)])
    with lzma.open(out, "wt", encoding="utf-8") as fh:
        json.dump(texts, fh, sort_keys=True)


def main() -> None:
    if sys.argv[1:2] == ["--keep"]:
        keep(int(sys.argv[2]), Path(sys.argv[3]))
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    compared, identical, failed, diffs, _, _ = compare(range(n))
    print(f"HTA 0.5.0 differential: {n} trace sets, {compared} analyses compared, {identical} identical, "
          f"{failed} not compared (HTA assertion)")
    for d in diffs[:30]:
        print(d)


if __name__ == "__main__":
    main()
