"""Named numpy columns: what the trace loader and analyses hold and return, without pandas.

A `Table` is a DataFrame's columns in order; `frame()` makes the DataFrame (pandas imported there,
at the edges that need one: hpcprof.api, collect's Parquet, --format json/table) and `write_csv`
writes the bytes pandas' `to_csv(index=False)` of `safe_text.csv_frame` would. The group
statistics are pandas groupby's arithmetic (Kahan sums, Welford variance), so that the numbers stay
HTA's to the last bit.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from hpcprof.core.safe_text import csv_cell

if TYPE_CHECKING:
    import pandas as pd

#: integral float64 values whose magnitudes sum below this add up exactly in any order
EXACT = float(1 << 53)
#: rows of a CSV made at a time: their cells' memory is then reused block after block rather than
#: new pages touched for all of them (launch's 25,861 rows in `trace all`: 1.7k -> 0 page faults, 29 -> 23 ms)
CSV_ROWS = 1024


class Table:
    """Columns of one length, in order. A column named in `categories` holds codes (-1: none) into
    its array of values (a pandas Categorical in `frame()`)."""

    def __init__(self, columns: Mapping[str, np.ndarray], categories: Mapping[str, np.ndarray] | None = None):
        self.columns = dict(columns)
        self.categories = dict(categories or {})

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def values(self, name: str) -> np.ndarray:
        """A column's values (a categorical one's as an object array; None where its code is -1)."""
        column = self.columns[name]
        if name not in self.categories:
            return column
        categories = self.categories[name]
        return np.append(categories, np.array([None], dtype=object))[column]

    def take(self, index: np.ndarray) -> Table:
        """The rows at `index` (positions or a mask), in that order."""
        return Table({k: v[index] for k, v in self.columns.items()}, self.categories)

    def frame(self) -> pd.DataFrame:
        """The DataFrame of these columns."""
        import pandas as pd

        return pd.DataFrame({
            name: pd.Categorical.from_codes(column, categories=self.categories[name])
            if name in self.categories else column
            for name, column in self.columns.items()}, columns=list(self.columns))

    def write_csv(self, out: TextIO, terminal: bool = False) -> None:
        """The CSV of `csv_frame(self.frame(), terminal).to_csv(out, index=False)`: floats as their
        shortest repr, missing values empty, text cells through safe_text.csv_cell."""
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([csv_cell(name, terminal) for name in self.columns])
        columns = [self.values(name) for name in self.columns]
        numbers = not any(column.dtype.kind == "O" for column in columns)
        for start in range(0, len(self), CSV_ROWS):
            cells = [_csv_texts(column[start:start + CSV_ROWS], terminal) for column in columns]
            if numbers:         # no cell to quote: the rows joined at once (launch: 32 -> 20 ms)
                out.write("\n".join(map(",".join, zip(*cells, strict=True))) + "\n")
            else:
                writer.writerows(zip(*cells, strict=True))


def _csv_texts(column: np.ndarray, terminal: bool) -> list[Any]:
    """The cells pandas writes for a column (its get_values_for_csv), as text; an object column's
    through csv_cell (the csv writer quotes them where needed)."""
    if column.dtype.kind == "f":    # pandas: astype(str), numpy's shortest repr: Python's repr (3x faster)
        texts = list(map(repr, column.tolist()))
        for i in np.flatnonzero(np.isnan(column)).tolist():
            texts[i] = ""
        return texts
    if column.dtype.kind == "O":
        return ["" if v is None or (isinstance(v, float) and math.isnan(v)) else csv_cell(v, terminal)
                for v in column.tolist()]
    return list(map(str, column.tolist()))


def texts(values: Iterable[Any]) -> np.ndarray:
    """Names or categories as an object array of text (a JSON number or true as its str)."""
    listed = [v if isinstance(v, str) else str(v) for v in values]
    out = np.empty(len(listed), dtype=object)
    out[:] = listed
    return out


def first_seen(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pd.factorize of integers: (codes in order of first appearance, the distinct values)."""
    uniques, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    order = np.argsort(first)
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return position[inverse.reshape(-1)], uniques[order]


def isin(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """np.isin of integers, by a binary search of the sorted `wanted` (np.isin's sort imports
    numpy.ma, 8 ms of start-up)."""
    if not len(wanted):
        return np.zeros(len(values), dtype=bool)
    ordered = np.sort(wanted)
    return ordered[np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)] == values


def quantile(values: np.ndarray, q: float) -> float:
    """np.quantile(values, q) of numbers without NaN (its linear method, the same arithmetic), with
    no numpy.ma: np.quantile's partition imports it (8 ms of start-up)."""
    ordered = np.sort(values)
    at = (len(ordered) - 1) * q
    if at >= len(ordered) - 1:
        return float(ordered[-1])
    below = math.floor(at)
    a, b = float(ordered[below]), float(ordered[below + 1])
    gamma = at - below
    return b - (b - a) * (1 - gamma) if gamma >= 0.5 else a + (b - a) * gamma


def used_categories(codes: np.ndarray, uniques: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, categories) with the categories no code uses left out (remove_unused_categories)."""
    used = np.zeros(len(uniques) + 1, dtype=bool)
    used[codes] = True      # code -1 marks the extra last slot
    renumbered = np.cumsum(used[:-1]) - 1
    return np.where(codes >= 0, renumbered[codes], -1), uniques[used[:-1]]


def sorted_groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct keys in sorted order, each row's group: its key's position) of text or
    numbers, as pandas groupby(sort=True) orders them."""
    if keys.dtype.kind == "O":
        distinct = sorted(set(keys.tolist()))
        position = {k: i for i, k in enumerate(distinct)}
        uniques = np.empty(len(distinct), dtype=object)
        uniques[:] = distinct
        return uniques, np.fromiter(map(position.__getitem__, keys.tolist()), dtype=np.int64, count=len(keys))
    uniques, groups = np.unique(keys, return_inverse=True)
    return uniques, groups.reshape(-1)


def group_sum(groups: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    """pandas groupby sum (Kahan-compensated in row order, NaN skipped, 0 for none) of `values` by
    `groups` (0 .. count - 1): whole numbers that cannot round add up exactly by bincount."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[~np.isnan(values)]
    if np.all(finite == np.floor(finite)) and np.abs(finite).sum() < EXACT:
        return np.bincount(groups, weights=np.where(np.isnan(values), 0.0, values), minlength=count)
    sums, compensation = [0.0] * count, [0.0] * count
    for group, value in zip(groups.tolist(), values.tolist(), strict=True):
        if value == value:
            y = value - compensation[group]
            t = sums[group] + y
            compensation[group] = t - sums[group] - y
            if compensation[group] != compensation[group]:
                compensation[group] = 0.0
            sums[group] = t
    return np.array(sums, dtype=np.float64)


def group_stats(groups: np.ndarray, values: np.ndarray, count: int) -> dict[str, np.ndarray]:
    """pandas `groupby(...).agg(["sum", "max", "min", "mean", "std"])` of values without NaN, by
    `groups` (0 .. count - 1, each present), with a missing std (one value) as 0: the mean is the
    Kahan sum over the count, the std pandas' one-pass (Welford) update in row order."""
    order = np.argsort(groups, kind="stable")
    sorted_values = values[order]
    starts = np.searchsorted(groups[order], np.arange(count))
    sums = group_sum(groups, values, count)
    sizes = np.diff(np.append(starts, len(values)))
    std = np.zeros(count)
    for i, (start, size) in enumerate(zip(starts.tolist(), sizes.tolist(), strict=True)):
        if size > 1:
            n, mean, m2 = 0, 0.0, 0.0
            for value in sorted_values[start:start + size].tolist():
                n += 1
                old = mean
                mean += (value - old) / n
                m2 += (value - mean) * (value - old)
            std[i] = math.sqrt(m2 / (n - 1))
    return {"sum": sums, "max": np.maximum.reduceat(sorted_values, starts),
            "min": np.minimum.reduceat(sorted_values, starts), "mean": sums / sizes, "std": std}


def sort_descending(values: np.ndarray) -> np.ndarray:
    """The order of pandas' `sort_values(ascending=False)` (its default quicksort, unstable: nargsort)
    of values without NaN."""
    reverse = np.arange(len(values))[::-1]
    return reverse[values[::-1].argsort(kind="quicksort")][::-1]
