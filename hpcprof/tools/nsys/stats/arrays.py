"""numpy helpers of the per-rank analyses: groups of sorted keys and
unions of time intervals (sorted sweeps, O(n log n), never a pairwise join).

One rank's export holds a few hundred GPU operations, on which pandas' groupby and frame building
cost ~0.1 ms a call, far more than the work; large exports hold millions, on which a Python loop
per group or range costs seconds. These helpers do both as a few numpy calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

#: a table as numpy columns by name (what the per-rank analyses compute; frames and Arrow tables are made from it)
Columns: TypeAlias = dict[str, np.ndarray]


def no_rows(names: list[str]) -> Columns:
    """The columns of a table of no rows, of no type (as a frame built with only its column names)."""
    return {name: np.empty(0, dtype=object) for name in names}


def rows_of(table: pd.DataFrame | Mapping[str, Any]) -> int:
    """The rows of a frame or of numpy columns."""
    return len(next(iter(table.values()))) if isinstance(table, Mapping) and table else len(table)


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


def one_of(values: np.ndarray, choices: tuple[int, ...]) -> np.ndarray:
    """values ∈ choices, by comparisons (np.isin sorts, in memory the size of `values` several times,
    and costs ~30 µs a call on a few rows)."""
    out = np.zeros(len(values), dtype=bool)
    for c in choices:
        out |= values == c
    return out


def filled(n: int, value: object) -> np.ndarray:
    """An object array of `n` references to `value` (np.full makes a new str per row)."""
    out = np.empty(n, dtype=object)
    out.fill(value)
    return out


def codes_of(values: np.ndarray) -> np.ndarray:
    """One code per distinct value (equal values, equal codes; in no particular order): all zeros
    when every value is the first. The values come in runs (an activity's rows: each export's
    together), so pandas' factorize is of each run's first value only, its code spread over the
    run: a comparison per row, no hashing (20 exports' 190 k rows of paths: 15 -> 2 ms)."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    import pandas as pd

    heads = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    if len(heads) == 1 and values[0] == values[0]:           # one run (of no NaN)
        return np.zeros(len(values), dtype=np.int64)
    return np.repeat(pd.factorize(values[heads])[0].astype(np.int64), np.diff(heads, append=len(values)))
