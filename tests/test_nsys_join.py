"""numerics.join_rows (the columnar reports' joins) against pandas' merge(sort=False), whose row
order the reports reproduced before: left rows in order, each one's matches in right order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hpcprof.tools.nsys.stats.numerics import join_rows


@pytest.mark.slow
@pytest.mark.parametrize("how", ["inner", "left"])
def test_join_rows_gives_pandas_merge_rows_in_its_order(how: str) -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        n_left, n_right = rng.integers(0, 40, 2)
        left = pd.DataFrame({"corr": rng.integers(0, 8, n_left), "proc": rng.integers(0, 3, n_left) << 24,
                             "a": np.arange(n_left)})
        right = pd.DataFrame({"corr": rng.integers(0, 8, n_right), "proc": rng.integers(0, 3, n_right) << 24,
                              "b": np.arange(n_right)})
        merged = left.merge(right, on=["corr", "proc"], how=how, sort=False)
        rows, matched = join_rows([left["corr"].to_numpy(), left["proc"].to_numpy()],
                                  [right["corr"].to_numpy(), right["proc"].to_numpy()], keep_unmatched=how == "left")
        assert rows.tolist() == merged["a"].tolist()
        assert matched.tolist() == merged["b"].fillna(-1).astype(np.int64).tolist()


def test_join_rows_of_empty_sides() -> None:
    empty = np.empty(0, dtype=np.int64)
    keys = np.array([5, 6, 5], dtype=np.int64)
    assert [a.tolist() for a in join_rows([keys], [empty])] == [[], []]
    assert [a.tolist() for a in join_rows([keys], [empty], keep_unmatched=True)] == [[0, 1, 2], [-1, -1, -1]]
    assert [a.tolist() for a in join_rows([empty], [keys])] == [[], []]
    assert [a.tolist() for a in join_rows([keys], [np.array([5, 5], dtype=np.int64)])] == [[0, 0, 2, 2], [0, 1, 0, 1]]
