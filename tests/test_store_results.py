"""Per-run Parquet result tables (hpcprof.run.results): typed round trip, names confined to
results/, atomic writes, damaged files as one-line errors."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.run.results import ResultError, list_tables, read_table, write_table


def test_round_trip_keeps_types(tmp_path: Path) -> None:
    df = pd.DataFrame({"rank": [0, 1], "Total Time (ns)": [10, 20], "name": ["a", "b"], "pct": [0.5, None],
                       "mixed": [1, "x"]})
    write_table(tmp_path, "nsys_cuda_gpu_kern_sum", df)
    write_table(tmp_path, "workload_seqpar.phases", pd.DataFrame({"phase": ["matmul1"]}))
    back = read_table(tmp_path, "nsys_cuda_gpu_kern_sum")
    assert back["Total Time (ns)"].dtype == "int64" and back["pct"].isna().tolist() == [False, True]
    assert back["mixed"].tolist() == ["1", "x"]
    assert list_tables(tmp_path) == ["nsys_cuda_gpu_kern_sum", "workload_seqpar.phases"]
    assert read_table(tmp_path, "absent") is None


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".hidden", "", "x" * 300, "a\x00b"])
def test_names_never_leave_results(tmp_path: Path, name: str) -> None:
    run = tmp_path / "run"
    with pytest.raises(ResultError):
        write_table(run, name, pd.DataFrame({"a": [1]}))
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_concurrent_writers_leave_one_whole_table(tmp_path: Path) -> None:
    frames = [pd.DataFrame({"v": list(range(i, i + 1000))}) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda df: write_table(tmp_path, "t", df), frames))
    back = read_table(tmp_path, "t")
    assert any(back.equals(f) for f in frames)
    assert os.listdir(tmp_path / "results") == ["t.parquet"]          # no temporary file left


def test_damaged_table_is_a_one_line_error(tmp_path: Path) -> None:
    path = write_table(tmp_path, "t", pd.DataFrame({"v": list(range(10000))}))
    data = bytearray(path.read_bytes())
    data[-200:] = os.urandom(200)
    path.write_bytes(bytes(data))
    with pytest.raises(ResultError) as err:
        read_table(tmp_path, "t")
    message = err.value.format_message()
    assert str(path) in message and "\n" not in message and err.value.exit_code == 2
