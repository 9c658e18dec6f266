"""The numpy helpers of the per-rank analyses against plain loops: range reductions, groups, and the
critical path's vectorised leads against the per-iteration, per-collective loop they replace."""

from __future__ import annotations

import statistics

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.critical_path import END, EVENT_COLUMNS, IDLE, _iteration_events
from hpcprof.analysis.ranges import range_reduce
from hpcprof.tools.nsys.stats import numerics
from hpcprof.tools.nsys.stats.arrays import group_starts


@pytest.mark.parametrize("longest", [300, 3])         # ranges over most rows (sparse table), short ones (reduceat)
def test_range_reduce_is_the_loop(longest: int) -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(-1000, 1000, 500)
    lo = rng.integers(0, 500, 2000)
    hi = np.minimum(lo + rng.integers(-5, longest, 2000), 500)
    assert (np.maximum(hi - lo, 0).sum() > 4 * 500 + 1024) == (longest == 300)
    for ufunc, pick in ((np.minimum, min), (np.maximum, max)):
        want = [pick(values[a:b]) if b > a else 0 for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
        assert range_reduce(values, lo, hi, ufunc, 0).tolist() == want


@pytest.mark.parametrize("cores", [1, 2, 3, 4])
def test_the_parallel_sort_is_numpys_sort(monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    """Slices sorted in threads, then merged: the array numpy's own sort gives, on packed keys
    (many equal high bits) and on any int64, for any number of cores and uneven slices."""
    monkeypatch.setattr(numerics, "PARALLEL_SORT_VALUES", 1000)
    monkeypatch.setattr(numerics, "usable_cpus", lambda: cores)
    rng = np.random.default_rng(11)
    packed = (rng.integers(0, 15, 10_007) << numerics.PACK_BITS) | rng.integers(0, 5000, 10_007)
    for values in (packed, rng.integers(-2**62, 2**62, 4_321), np.arange(5_000)[::-1].copy()):
        got = values.copy()
        numerics.sort_in_place(got)
        assert np.array_equal(got, np.sort(values))


@pytest.mark.parametrize("block", [7, 64, 1 << 18])
def test_group_statistics_are_the_loop(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Groups' count, total, min, max, median and StdDev (its deviations summed block by block,
    groups running across blocks) against statistics per group in Python; exact_sum against
    Python's sum, in int64 and past it."""
    monkeypatch.setattr(numerics, "DEVIATION_BLOCK", block)
    rng = np.random.default_rng(block)
    ngroups = 40
    codes = rng.integers(0, ngroups, 3000)
    codes[codes == 5] = 6                                  # an empty group
    values = rng.integers(0, 10**9, 3000) * rng.integers(0, 2, 3000)
    for g in (numerics.Groups(codes, values, ngroups), numerics.Groups(codes, values - 10**8, ngroups)):
        shift = 0 if g.min.min() >= 0 else 10**8
        for k in range(ngroups):
            rows = (values[codes == k] - shift).tolist()
            assert g.count[k] == len(rows)
            if not rows:
                continue
            assert (g.total[k], g.min[k], g.max[k]) == (sum(rows), min(rows), max(rows))
            assert g.med[k] == float(np.median(rows))
            assert g.std[k] == pytest.approx(statistics.stdev(rows) if len(rows) > 1 else 0.0, rel=1e-12)
    big = np.array([2**62, 2**62, -5], dtype=np.int64)
    for array in (values, big, big[:0]):
        assert numerics.exact_sum(array) == sum(array.tolist())


def test_group_starts_is_groupby() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 4, 300), rng.integers(0, 5, 300)
    order, first = group_starts(a, b)
    groups = pd.DataFrame({"a": a, "b": b}).groupby(["a", "b"], sort=True).indices
    bounds = np.append(first, len(order))
    assert [order[x:y].tolist() for x, y in zip(bounds[:-1], bounds[1:], strict=True)] == \
        [v.tolist() for v in groups.values()]


def _runs(labels: np.ndarray, starts: np.ndarray, lo: int, hi: int) -> list[tuple[str, int, int]]:
    if len(labels) == 0:
        return [(IDLE, lo, hi)] if hi > lo else []
    first = np.flatnonzero(np.concatenate(([True], labels[1:] != labels[:-1])))
    bounds = list(np.maximum.accumulate([lo] + [int(min(max(starts[i], lo), hi)) for i in first[1:]] + [hi]))
    return [(str(labels[i]), int(bounds[k]), int(bounds[k + 1])) for k, i in enumerate(first)]


def _loop(rank: int, iteration: np.ndarray, is_coll: np.ndarray, start: np.ndarray, end: np.ndarray,
          channel: np.ndarray, seq: np.ndarray, label: np.ndarray, kind: np.ndarray) -> list[tuple]:
    """The events as the loop before the vectorised form made them: per iteration, per collective, with
    the pieces of the rank's other work (every iteration's: a union made by a plain loop) inside each
    collective after it."""
    rows: list[tuple] = []
    union: list[list[int]] = []
    for s, e in sorted(zip(start[~is_coll].tolist(), end[~is_coll].tolist(), strict=True)):
        if union and s <= union[-1][1]:
            union[-1][1] = max(union[-1][1], e)
        else:
            union.append([s, e])
    for number in np.unique(iteration):
        mine = iteration == number
        cm, wm = mine & is_coll, mine & ~is_coll
        if not cm.any():
            continue
        cs, ce = start[cm], end[cm]
        keys = list(zip(channel[cm].tolist(), seq[cm].tolist(), strict=True))
        ws, we, wl = start[wm], end[wm], label[wm]
        first_start, last_end = int(start[mine].min()), int(end[mine].max())

        def lead(key: tuple, lo: int, hi: int, number: int = int(number), ws: np.ndarray = ws,
                 we: np.ndarray = we, wl: np.ndarray = wl) -> None:
            sel = (we > lo) & (we <= hi)
            for name, s, e in _runs(wl[sel], ws[sel], lo, hi):
                rows.append((rank, number, "compute", key[0], key[1], name, s, e, "", -1))

        by_end = np.argsort(ce, kind="stable")
        latest = np.searchsorted(ce[by_end], cs, side="right") - 1
        for j in range(len(cs)):
            i = int(latest[j]) - int(latest[j] >= 0 and by_end[latest[j]] == j)
            prev = int(by_end[i]) if i >= 0 else -1
            pkey = keys[prev] if prev >= 0 else END
            lead(keys[j], int(ce[prev]) if prev >= 0 else first_start, int(cs[j]))
            rows.append((rank, int(number), "collective", keys[j][0], keys[j][1], str(kind[cm][j]), int(cs[j]),
                         int(ce[j]), pkey[0], pkey[1]))
            rows.extend((rank, int(number), "overlap", keys[j][0], keys[j][1], "", max(s, int(cs[j])),
                         min(e, int(ce[j])), "", -1) for s, e in union if min(e, int(ce[j])) > max(s, int(cs[j])))
        last = int(np.argmax(ce))
        lead(END, int(ce[last]), last_end)
        rows.append((rank, int(number), "end", END[0], END[1], "", last_end, last_end, keys[last][0], keys[last][1]))
    return rows


def test_vectorised_leads_are_the_loop() -> None:
    """Random iterations of overlapping collectives on two channels (zero-length ones included),
    compute with repeated labels, idle leads; at epoch-scale times."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(1, 120))
        iteration = np.sort(rng.integers(0, 6, n))
        start = 1_700_000_000_000_000_000 + iteration * 10_000 + rng.integers(0, 9_000, n)
        order = np.lexsort((start, iteration))
        iteration, start = iteration[order], start[order]
        end = start + rng.choice([0, 1, 50, 400, 2_000], n)
        is_coll = rng.random(n) < 0.3
        channel = np.array([f"stream{c}" if k else "nan" for c, k in zip(rng.integers(0, 2, n), is_coll, strict=True)],
                           dtype=object)
        seq = np.where(is_coll, rng.integers(0, 4, n), -1)
        label = rng.choice(np.array(["fwd", "bwd", "opt", None], dtype=object), n)
        kind = np.where(is_coll, np.array("AllReduce", dtype=object), None)
        by = np.lexsort((end, start, iteration))          # as rank_events sorts them: iteration, start, end
        args = (iteration[by], is_coll[by], start[by], end[by], channel[by], seq[by], label[by], kind[by])
        got = _iteration_events(np.full(n, trial), iteration[by], iteration[by], np.zeros(n, dtype=np.int64),
                                *args[1:])                  # one rank: its iteration numbers as keys, times unshifted
        want = _loop(trial, *args)
        assert list(zip(*(got[c].tolist() for c in EVENT_COLUMNS), strict=True)) == want, trial
