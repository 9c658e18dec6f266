"""trace/table.py without pandas gives what pandas gives: the CSV bytes of to_csv, groupby's sums,
means and stddevs to the last bit, sort_values' order."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from hpcprof.core.safe_text import csv_frame
from hpcprof.tools.torch.analysis.table import Table, group_stats, group_sum, sort_descending, sorted_groups


def _texts(values: list[object]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@pytest.mark.parametrize("terminal", [False, True])
def test_csv_bytes_are_pandas_to_csv(terminal: bool) -> None:
    floats = np.array([0.1, -0.0, 1e16, 123456789.125, 1e-5, np.nan, 2.0 / 3, -7.0, 5e-324, 9999999999999998.0])
    n = len(floats)
    table = Table({
        "rank": np.arange(n, dtype=np.int64) - 3,
        "value (us)": floats,
        "flag": floats > 0,
        "name": _texts(["a,b", 'say "x"', "=1+1", "-1.5", "+x", "line\nbreak", "cr\rhere", None, "", "\x1b[31mred"]),
        "cat": np.array([0, 1, -1, 2, 0, 1, 2, 2, 0, -1], dtype=np.int64),
    }, {"cat": _texts(["kernel", "@cmd", "gpu_memcpy"])})
    out = io.StringIO()
    table.write_csv(out, terminal)
    expected = io.StringIO()
    csv_frame(table.frame(), terminal=terminal).to_csv(expected, index=False)
    assert out.getvalue() == expected.getvalue()


def test_float_cells_are_numpy_str() -> None:
    """write_csv's float cells (repr) are what pandas writes (numpy's astype(str)), over magnitudes
    from 1e-30 to 1e30, whole numbers, and where either switches to exponents."""
    rng = np.random.default_rng(11)
    values = np.concatenate([rng.random(20000) * 10.0 ** rng.integers(-30, 30, 20000), np.round(rng.random(5000) * 1e6),
                             [1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5, 0.0001, -0.0, 0.0, 5e-324, np.inf, -np.inf,
                              1.7976931348623157e308]])
    out = io.StringIO()
    Table({"v": values}).write_csv(out)
    assert out.getvalue().split("\n")[1:-1] == values.astype(str).tolist()


def test_group_statistics_are_pandas_groupby() -> None:
    """Kahan sums (fractions: the compensated loop; whole numbers: bincount), means, Welford's
    stddev, max and min per group, bit for bit."""
    rng = np.random.default_rng(7)
    for values in (rng.random(5000) * 1e3, np.round(rng.random(5000) * 1e4), rng.standard_normal(3000) * 1e12):
        groups = rng.integers(0, 9, len(values))
        groups[:9] = np.arange(9)   # every group present
        expected = pd.DataFrame({"g": groups, "v": values}).groupby("g")["v"].agg(["sum", "max", "min", "mean", "std"])
        got = group_stats(groups, values, 9)
        for column in ("sum", "max", "min", "mean", "std"):
            assert got[column].tolist() == expected[column].fillna(0).tolist(), column
    with_nan = np.array([1.5, np.nan, 2.25, np.nan])
    assert group_sum(np.array([0, 0, 1, 2]), with_nan, 3).tolist() == [1.5, 2.25, 0.0]


def test_sort_and_groups_are_pandas() -> None:
    rng = np.random.default_rng(3)
    values = np.round(rng.random(200) * 20)   # many ties: the order of equal values is quicksort's
    expected = pd.DataFrame({"v": values}).sort_values(by=["v"], ascending=False).index.to_numpy()
    assert sort_descending(values).tolist() == expected.tolist()
    labels = _texts(["b", "others", "a", "b", "Zed"])
    uniques, groups = sorted_groups(labels)
    codes, pandas_uniques = pd.factorize(labels, sort=True)
    assert uniques.tolist() == list(pandas_uniques) and groups.tolist() == codes.tolist()
