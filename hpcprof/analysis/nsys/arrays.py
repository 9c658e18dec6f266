"""numpy helpers of the per-rank analyses: groups of sorted keys and reductions over index ranges.

One rank's export holds a few hundred GPU operations, on which pandas' groupby and frame building
cost ~0.1 ms a call, far more than the work; large exports hold millions, on which a Python loop
per group or range costs seconds. These helpers do both as a few numpy calls.
"""

from __future__ import annotations

import numpy as np


def group_starts(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, first): `order` sorts the rows by `keys` (first key most significant; stable), and
    `first` holds the positions in that order where each group of equal keys starts."""
    order = np.lexsort(keys[::-1])
    if len(order) == 0:
        return order, np.empty(0, dtype=np.int64)
    change = np.zeros(len(order), dtype=bool)
    change[0] = True
    for key in keys:
        k = key[order]
        change[1:] |= k[1:] != k[:-1]
    return order, np.flatnonzero(change)


def range_reduce(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, ufunc: np.ufunc, empty: int) -> np.ndarray:
    """`ufunc` (np.minimum, np.maximum) over values[lo:hi] for each (lo, hi); `empty` where hi <= lo.
    A sparse table: log2(n) vectorised levels, no Python loop per range."""
    values = np.asarray(values)
    out = np.full(len(lo), empty, dtype=values.dtype)
    length = hi - lo
    some = length > 0
    if not some.any():
        return out
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
