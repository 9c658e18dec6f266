"""The one rule for a profile's clocks (hpcprof.analysis.clocks): a rank's times that cannot be
believed are named, and ranks' clocks far apart are aligned from the collectives they share."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hpcprof.analysis import clocks
from hpcprof.analysis.critical_path import EVENT_COLUMNS

S = 1_000_000_000


def test_times_that_cannot_be_believed() -> None:
    start, end = np.array([10.0, 20.0, 30.0]), np.array([15.0, 25.0, 35.0])
    assert clocks.clock_problem(start, end, 1.0) is None
    assert "negative timestamps" in clocks.clock_problem(start - 25, end, 1.0)
    assert "not numbers" in clocks.clock_problem(np.array([np.inf]), np.array([1.0]), 1.0)
    assert "out of range" in clocks.clock_problem(np.array([1e300]), np.array([1e300]), 1000.0)
    backwards = np.array([15.0, 25.0, 30.0 - 1.0])
    assert "1 of 3 GPU operations end before they start (by up to 1.0 µs)" in \
        clocks.clock_problem(start, backwards, 1000.0)
    assert clocks.clock_problem(start, backwards, 1000.0, slack_ns=1000) is None         # Kineto's µs rounding


def test_a_gpu_clock_off_its_cpu_clock_by_kind() -> None:
    launch = np.arange(8, dtype=np.float64) * 10 * S
    kind = np.array(["kernel"] * 4 + ["memset"] * 4, dtype=object)
    start = launch + 5_000
    assert clocks.clock_problem(start, start + 100, 1.0, launch=launch, kind=kind) is None
    ahead = np.where(kind == "kernel", start + 10 * S, start)        # the kernels 10 s late, the memsets not
    assert clocks.clock_problem(ahead, ahead + 100, 1.0, launch=launch, kind=kind) == (
        "its kernel clock is 10.0 s ahead of its CPU clock (each of its 4 launched kernel operations starts that "
        "long or longer after the call that launched it)")
    behind = np.where(kind == "memset", start - 2 * S, start) + 5 * S
    assert "its memset clock is 2.0 s behind its CPU clock" in \
        clocks.clock_problem(behind, behind + 100, 1.0, launch=launch + 5 * S, kind=kind)
    few = np.where(kind == "kernel", start + 10 * S, start)[2:]      # 2 kernels: too few to judge
    assert clocks.clock_problem(few, few + 100, 1.0, launch=launch[2:], kind=kind[2:]) is None


def events(offsets: dict[int, int]) -> pd.DataFrame:
    """Two iterations of two collectives on each rank, ending together on one clock, each rank's times
    then `offsets[rank]` off it (a compute row before each collective)."""
    rows = []
    for rank, off in offsets.items():
        for it in range(2):
            for seq in range(2):
                end = (it * 10 + seq * 4 + 4) * 1_000_000 + rank * 300          # ends within µs of each other
                start = end - 1_000_000 - rank * 50_000
                rows.append((rank, it, "compute", "stream0", seq, "mm", start - 2_000_000 + off, start + off, "", -1))
                rows.append((rank, it, "collective", "stream0", seq, "AllReduce", start + off, end + off, "", -1))
    return pd.DataFrame(rows, columns=EVENT_COLUMNS)


def test_rank_clocks_far_apart_are_aligned_and_said() -> None:
    skewed = events({0: 0, 1: 3600 * S, 2: -2 * S})
    offsets = clocks.rank_offsets(skewed)
    assert abs(offsets[1] - 3600 * S) < 1000 and abs(offsets[2] + 2 * S) < 1000 and offsets[0] == 0
    moved, said = clocks.aligned(skewed)
    assert said == ("clocks: rank 1's clock is 3,600.0 s ahead of rank 0's, rank 2's clock is 2.0 s behind rank 0's "
                    "(from the ends of the collectives they share, which end together): their times are moved onto "
                    "rank 0's clock")
    pd.testing.assert_frame_equal(moved.drop(columns=["start", "end"]), skewed.drop(columns=["start", "end"]))
    assert (moved["end"] - events({0: 0, 1: 0, 2: 0})["end"]).abs().max() < 1000


def test_clocks_within_a_second_stay_as_they_are() -> None:
    near = events({0: 0, 1: 26_000_000})            # nsys sessions started 26 ms apart (the 2xH200 fixture)
    moved, said = clocks.aligned(near)
    assert said is None and moved is near
    assert clocks.aligned(events({0: 0}))[1] is None   # one rank: nothing to align
