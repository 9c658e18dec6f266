"""Reductions over ranges of rows, for the analyses of every tool: the first start and last end
of the GPU operations each step or NVTX range launched; unions of time intervals, their overlap
and the pieces of one set inside another (sorted sweeps, O(n log n), never a pairwise join; numpy
only)."""

from __future__ import annotations

import numpy as np

#: range_reduce reduces the rows of the ranges themselves while they hold at most this many rows per value
#: (nested NVTX ranges: a few times the calls), else it builds the sparse table (ranges over most rows)
DIRECT_ROWS_PER_VALUE = 4


def range_reduce(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, ufunc: np.ufunc, empty: int) -> np.ndarray:
    """`ufunc` (np.minimum, np.maximum) over values[lo:hi] for each (lo, hi); `empty` where hi <= lo.
    No Python loop per range: one ufunc.reduceat over the ranges' rows where they hold few rows in
    all (one rank's file), else a sparse table (log2(n) vectorised levels; O(n log n) however long
    and overlapping the ranges)."""
    values = np.asarray(values)
    length = hi - lo
    some = length > 0
    if not some.any():
        return np.full(len(lo), empty, dtype=values.dtype)
    if int(length[some].sum()) <= DIRECT_ROWS_PER_VALUE * len(values) + 1024:
        bounds = np.empty(2 * len(lo), dtype=np.intp)               # [lo, hi) pairs; a last row for hi == n
        bounds[0::2], bounds[1::2] = np.where(some, lo, 0), np.where(some, hi, 0)
        return np.where(some, ufunc.reduceat(np.append(values, values[:1]), bounds)[0::2], empty)
    out = np.full(len(lo), empty, dtype=values.dtype)
    level = np.frexp(length[some].astype(np.float64))[1] - 1          # floor(log2(length))
    qlo, qhi = lo[some], hi[some]
    found = np.empty(len(qlo), dtype=values.dtype)
    table, width = values, 1
    for j in range(int(level.max()) + 1):
        if j:
            table = ufunc(table[:-width], table[width:])                # table[i]: over values[i:i + 2 * width]
            width *= 2
        at = level == j
        if at.any():
            found[at] = ufunc(table[qlo[at]], table[qhi[at] - width])
    out[some] = found
    return out


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (start, end) arrays."""
    if len(start) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    order = np.argsort(start, kind="stable")
    s, e = np.asarray(start)[order], np.asarray(end)[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > reach[:-1]))
    idx = np.flatnonzero(new)
    seg_end = np.maximum.reduceat(e, idx)
    return s[idx], seg_end


def covered(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals."""
    s, e = merge_intervals(start, end)
    return int((e - s).sum())


def intersection(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length of the intersection of two unions of disjoint sorted intervals (a sweep)."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return 0
    times = np.concatenate((a[0], a[1], b[0], b[1]))
    da = np.concatenate((np.ones(len(a[0])), -np.ones(len(a[1])), np.zeros(len(b[0]) + len(b[1]))))
    db = np.concatenate((np.zeros(len(a[0]) + len(a[1])), np.ones(len(b[0])), -np.ones(len(b[1]))))
    order = np.argsort(times, kind="stable")
    t = times[order]
    both = (np.cumsum(da[order]) > 0) & (np.cumsum(db[order]) > 0)
    return int((np.diff(t) * both[:-1]).sum())


def covered_within(union: tuple[np.ndarray, np.ndarray], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each interval [start, end): how much of it the disjoint sorted `union` covers."""
    us, ue = union
    if len(us) == 0:
        return np.zeros(len(start), dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(ue - us)))

    def upto(t: np.ndarray) -> np.ndarray:            # covered length in (-inf, t)
        i = np.searchsorted(us, t, side="right")       # segments starting before or at t
        full = cum[np.maximum(i - 1, 0)]
        last = np.where(i > 0, np.clip(t - us[np.maximum(i - 1, 0)], 0, (ue - us)[np.maximum(i - 1, 0)]), 0)
        return np.where(i > 0, full + last, 0)

    return upto(np.asarray(end)) - upto(np.asarray(start))


def inside(start: np.ndarray, end: np.ndarray, other_start: np.ndarray, other_end: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of the `other` intervals cut into each interval [start, end): (which interval,
    piece start, piece end), by interval, then start; pieces of no length left out."""
    us, ue = merge_intervals(other_start, other_end)
    lo = np.searchsorted(ue, start, side="right")               # the first segment ending after start
    n = np.maximum(np.searchsorted(us, end, side="left") - lo, 0)  # ... to the last starting before end
    which = np.repeat(np.arange(len(start)), n)
    seg = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + np.repeat(lo, n)
    lo_at, hi_at = np.maximum(us[seg], np.asarray(start)[which]), np.minimum(ue[seg], np.asarray(end)[which])
    some = hi_at > lo_at                                        # a collective of no length: no piece
    return which[some], lo_at[some], hi_at[some]
