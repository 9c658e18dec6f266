"""Reductions over ranges of rows, for the analyses of every tool: the first start and last end
of the GPU operations each step or NVTX range launched (numpy only)."""

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
