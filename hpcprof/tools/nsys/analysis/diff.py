"""`hpcprof diff`'s reading of nsys exports (hpcprof.analysis.diff.profiles says what a Profile
holds): the window of nsys/window.py, each GPU operation in the iteration its launch falls in."""

from __future__ import annotations

from pathlib import Path

from hpcprof.analysis.diff.profiles import (
    ITERATION_COLUMNS,
    DiffInputError,
    Profile,
    capture_iterations,
    iteration_of,
    samples_of,
)


def diff_profile(files: list[Path], spec: str, include_last_step: bool = False) -> Profile:
    """The Profile of nsys exports (one per rank, or one holding several processes); an export nsys's
    schema cannot read is a DiffInputError (`include_last_step` is a Kineto trace's: unused here)."""
    from hpcprof.tools.nsys.stats.schema import NsysInputError

    try:
        return _profile(files, spec)
    except NsysInputError as exc:
        raise DiffInputError(str(exc)) from None


def _profile(files: list[Path], spec: str) -> Profile:
    """diff_profile, its nsys errors raised."""
    from contextlib import ExitStack

    import numpy as np
    import pandas as pd

    from hpcprof.analysis.categories import run_categories
    from hpcprof.tools.nsys.analysis import distributed as dist
    from hpcprof.tools.nsys.analysis import window as win
    from hpcprof.tools.nsys.analysis.stats_command import open_exports
    from hpcprof.tools.nsys.analysis.steps import UNKNOWN, launch_times

    def refuse(path: Path, why: str) -> None:
        raise DiffInputError(why if why.startswith(str(path)) else f"{path}: {why}")

    with ExitStack() as stack:
        exports, _ = open_exports(files, stack, report=refuse)
        act = dist.load_activity(exports, {})
        if act.failed:
            refuse(*next(iter(act.failed.items())))
        rank, start, end = act.column("rank"), act.column("start"), act.column("end")
        iteration = np.zeros(len(rank), dtype=np.int64)
        its = capture_iterations(rank, start, end)
        labels = dict.fromkeys(its["rank"].tolist(), win.CAPTURE)
        if spec != "capture":
            window = win.find_window(act, win.window_range(spec, files))
            w = window.iterations
            marked = np.isin(rank, w["rank"])
            launch = launch_times(act).astype(np.float64)
            launch[launch == UNKNOWN] = np.nan
            bounds = {"rank": w["rank"], "iteration": w["iteration"], "cpu_start": w["cpu_start"].astype(np.float64),
                      "cpu_end": w["cpu_end"].astype(np.float64), "start": w["start_ns"].astype(np.float64),
                      "end": w["end_ns"].astype(np.float64)}
            iteration = np.where(marked, iteration_of(rank, launch, start.astype(np.float64), bounds), iteration)
            its = pd.concat([its[~its["rank"].isin(w["rank"])],
                             pd.DataFrame({"rank": w["rank"], "iteration": w["iteration"],
                                           "gpu_ns": w["end_ns"] - w["start_ns"]})], ignore_index=True)
            labels |= window.labels
        names = act.column("name").astype(object)
        categories = run_categories(files[0]).of(names)
        samples = samples_of(rank, iteration, names, act.column("short").astype(object), end - start, categories)
    its = its.sort_values(["rank", "iteration"], ignore_index=True)[ITERATION_COLUMNS]
    unmarked = sorted(r for r, label in labels.items() if label != spec)     # the range not found: detected or capture
    if spec.startswith("nvtx:") and unmarked:
        raise DiffInputError(f"--window {spec}: rank(s) {', '.join(map(str, unmarked))} have no instance of the NVTX "
                             "range on the GPU; give the range that marks one iteration, or --window auto")
    return Profile(files, sorted(set(labels.values())), its, samples)
