"""numpy helpers of the per-rank analyses: groups of sorted keys (unions of time intervals:
hpcprof.analysis.ranges).

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
