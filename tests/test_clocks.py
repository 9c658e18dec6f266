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


def test_the_suspects_are_the_ranks_with_a_problem() -> None:
    """clock_suspects, the tests of clock_problem for all ranks at once, names exactly the ranks it
    finds a problem in (ns, no slack): each fault of the module's rules, at its edge and past it, on
    its own rank among ranks without one."""
    rng = np.random.default_rng(3)
    faults = [None, "nan", "inf", "negative", "zero", "huge", "backwards", "late", "just late", "early",
              "just early", "late, few", "late, one kind", "no launch", "no kind"]
    for _ in range(20):
        group, start, end, launch, kind = [], [], [], [], []
        for g, fault in enumerate(faults):
            n = int(rng.integers(1, 12))
            lag = rng.uniform(1e3, 1e6, n)
            launched = rng.uniform(S, 100 * S, n)
            kinds = rng.choice(np.array(["kernel", "memcpy", None], dtype=object), n, p=[0.7, 0.2, 0.1])
            if fault in ("late", "just late", "early", "just early", "late, few", "late, one kind"):
                n = 5 if fault != "late, few" else 3
                lag, launched, kinds = np.full(n, 5e3), np.full(n, 10.0 * S), np.array(["kernel"] * n, dtype=object)
                shift = {"late": 2 * S, "just late": S - 5e3 - 1, "early": -3 * S, "just early": -S - 5e3 + 1,
                         "late, few": 2 * S, "late, one kind": 2 * S}[fault]
                lag = lag + np.where(np.arange(n) < 4, shift, 0) if fault == "late, one kind" else lag + shift
                if fault == "late, one kind":
                    kinds = np.array(["memset"] * 4 + ["kernel"], dtype=object)
            first = launched + lag
            last = first + rng.uniform(0, 1e4, n)
            if fault in ("nan", "inf", "negative", "zero", "huge", "backwards"):
                at = int(rng.integers(0, n))
                first[at] = {"nan": np.nan, "inf": np.inf, "negative": -1.0, "zero": 0.0, "huge": 2.0**62,
                             "backwards": last[at] + 1}[fault]
            if fault == "no launch":
                launched = np.full(n, np.nan)
            if fault == "no kind":
                kinds = np.full(n, None, dtype=object)
            group += [g] * n
            start, end, launch, kind = (np.concatenate((a, b)) for a, b in
                                        ((start, first), (end, last), (launch, launched), (kind, kinds)))
        group_of = np.array(group)
        suspects = clocks.clock_suspects(group_of, len(faults), start, end, launch, np.asarray(kind, dtype=object))
        problems = [clocks.clock_problem(start[group_of == g], end[group_of == g], 1.0, launch=launch[group_of == g],
                                         kind=np.asarray(kind, dtype=object)[group_of == g]) is not None
                    for g in range(len(faults))]
        assert suspects.tolist() == problems
        assert [f for f, p in zip(faults, problems, strict=True) if p] == \
            ["nan", "inf", "negative", "huge", "backwards", "late", "early", "late, one kind"]


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
