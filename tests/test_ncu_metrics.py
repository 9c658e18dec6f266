"""Echo's kernel metric table from real ncu exports, checked number for number against the CSV rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcprof.tools.ncu.analysis.metrics import (
    ECHO_COLUMNS,
    function_name,
    kernel_table,
    metric_key,
    metrics_table,
)
from hpcprof.tools.ncu.analysis.parse import load

GOLD = "ncu/gold_ncu_2022.3"
B200 = "ncu/superbench_cublaslt_ncu_b200.log"
NAN = np.nan

# Read off the details CSV rows by hand: (Compute (SM) [%], # SMs, Memory [%], DRAM Throughput,
# Achieved Occupancy, Theoretical Occupancy, L1/TEX Hit Rate, L2 Hit Rate); 2022 has no # SMs.
ECHO_74DE19F = [
    [0, "julia__5_6739", 17.56, NAN, 95.70, 95.70, 69.95, 100, 0, 99.94],
    [1, "julia_bb_4477", 66.27, NAN, 44.22, 32.39, 49.98, 50, 0.00, 16.58],
]
ECHO_7DC4FA5 = [
    [0, "julia__5_11155", 17.89, NAN, 90.63, 90.63, 66.78, 100, 0, 100.12],
    [1, "julia__5_11236", 23.98, NAN, 42.36, 42.36, 38.56, 100, 0, 100.04],
    [2, "julia__5_11236", 24.76, NAN, 49.38, 49.38, 38.03, 100, 0, 100.04],
    [3, "julia__5_11155", 24.09, NAN, 43.17, 43.17, 38.36, 100, 0, 100.08],
    [4, "julia_frb_5885", 49.77, NAN, 67.20, 67.20, 50.06, 50, 1.41, 75.89],
]
# superbench's B200 log (ncu 2024+ names, "# SMs" present, no Memory Workload Analysis section).
ECHO_B200 = [[0, "cutlass3x_sm100_tensorop_s64x256x32gemm_f8_f8_f32_f16_f16_64x256x128_1x1x1_0_tnn_"
              "align4_1sm_bias_f16_relu_aux_scalemax", 23.59, 152, 21.68, 0.74, 15.53, 18.75, NAN, NAN]]


def expected(rows: list[list]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=ECHO_COLUMNS)
    return df.astype({c: "float64" for c in ECHO_COLUMNS[2:]}).astype({"SM": "Int64"})


def check(actual: pd.DataFrame, rows: list[list]) -> None:
    pd.testing.assert_frame_equal(actual, expected(rows), check_dtype=False, check_exact=True)
    assert actual["SM"].dtype == "Int64"
    assert all(actual[c].dtype == "float64" for c in ECHO_COLUMNS[2:] if c != "SM")


@pytest.mark.parametrize("name, rows", [
    (f"{GOLD}/indexspaces_74de19f_details.csv", ECHO_74DE19F),
    (f"{GOLD}/indexspaces_7dc4fa5_details.csv", ECHO_7DC4FA5),
    (B200, ECHO_B200),
])
def test_echo_table_from_details(fixtures_dir: Path, name: str, rows: list[list]) -> None:
    table = kernel_table(load(fixtures_dir / name))
    assert list(table.columns) == ECHO_COLUMNS
    check(table, rows)


@pytest.mark.parametrize("report, rows", [("indexspaces_74de19f", ECHO_74DE19F),
                                          ("indexspaces_7dc4fa5", ECHO_7DC4FA5)])
@pytest.mark.parametrize("page", ["raw", "raw_baseunits"])
def test_echo_table_from_raw_page_agrees(fixtures_dir: Path, report: str, rows: list[list],
                                          page: str) -> None:
    """The raw metrics behind each column give the details values (6 decimals vs 2); SM = 84."""
    table = kernel_table(load(fixtures_dir / GOLD / f"{report}_{page}.csv"))
    assert table["SM"].tolist() == [84] * len(rows)             # NVIDIA A40
    details = expected(rows)
    numeric = [c for c in ECHO_COLUMNS[2:] if c != "SM"]
    assert table["Kernel Name"].tolist() == details["Kernel Name"].tolist()
    np.testing.assert_allclose(table[numeric].to_numpy(), details[numeric].to_numpy(), atol=0.005 + 1e-9)


def test_echo_table_from_raw_keeps_six_decimals(fixtures_dir: Path) -> None:
    table = kernel_table(load(fixtures_dir / GOLD / "indexspaces_74de19f_raw.csv"))
    gold = json.loads((fixtures_dir / GOLD / "ncu_report_gold.json").read_text())["indexspaces_74de19f"]
    for row, kernel in zip(table.itertuples(), gold, strict=True):
        assert row[3] == pytest.approx(kernel["sm__throughput.avg.pct_of_peak_sustained_elapsed"], abs=5e-7)
        assert row[5] == pytest.approx(
            kernel["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"], abs=5e-7)
        assert row[7] == pytest.approx(kernel["sm__warps_active.avg.pct_of_peak_sustained_active"], abs=5e-7)


def test_kernel_names_are_function_base_names(fixtures_dir: Path) -> None:
    gold = json.loads((fixtures_dir / GOLD / "ncu_report_gold.json").read_text())
    for report, kernels in gold.items():
        for kernel in kernels:
            assert function_name(kernel["demangled_name"]) == kernel["function_name"]
        table = kernel_table(load(fixtures_dir / GOLD / f"{report}_details.csv"))
        assert table["Kernel Name"].tolist() == [k["function_name"] for k in kernels]


@pytest.mark.parametrize("demangled, base", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "at::detail::Array<char *, 1>>(int, T2, T3)", "vectorized_elementwise_kernel"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(T1::Params)", "Kernel2"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>"
     "(T2 *, const T1 *, int, int, int, const bool *, int, bool)", "softmax_warp_forward"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm *, unsigned long, ncclWork *)",
     "ncclKernel_AllReduce_RING_LL_Sum_float"),
    ("ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn"),
    ("julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)", "julia__5_6739"),
])
def test_function_name(demangled: str, base: str) -> None:
    assert function_name(demangled) == base
    assert function_name(base) == base


def test_metric_key() -> None:
    assert metric_key("Occupancy/Achieved Occupancy") == ("Occupancy", "Achieved Occupancy")
    assert metric_key("Memory Workload Analysis/L1/TEX Hit Rate") == \
        ("Memory Workload Analysis", "L1/TEX Hit Rate")
    assert metric_key("gpu__time_duration.sum") == ("", "gpu__time_duration.sum")
    for bad in ("Duration", "/Duration", "Occupancy/"):
        with pytest.raises(ValueError, match="Section Name/Metric Name"):
            metric_key(bad)


def test_requested_metrics_in_base_units(fixtures_dir: Path) -> None:
    table = kernel_table(load(fixtures_dir / GOLD / "indexspaces_74de19f_details.csv"), [
        "GPU Speed Of Light Throughput/Duration",        # "459.46" usecond, "8.97" msecond
        "Launch Statistics/Registers Per Thread",
        "Launch Statistics/Dynamic Shared Memory Per Block",  # "0" byte/block, "67.71" Kbyte/block
        "Memory Workload Analysis/Memory Throughput",    # Gbyte/second, not the SOL percentage
        "Launch Statistics/Function Cache Configuration",
        "Source Counters/No Such Metric",
    ])
    assert list(table.columns[len(ECHO_COLUMNS):]) == [
        "GPU Speed Of Light Throughput/Duration [ns]",
        "Launch Statistics/Registers Per Thread [register/thread]",
        "Launch Statistics/Dynamic Shared Memory Per Block [byte/block]",
        "Memory Workload Analysis/Memory Throughput [byte/s]",
        "Launch Statistics/Function Cache Configuration",
        "Source Counters/No Such Metric",
    ]
    rows = table.iloc[:, len(ECHO_COLUMNS):].values.tolist()
    assert rows[0][:5] == [459460, 16, 0, 661.05e9, "cudaFuncCachePreferNone"]
    assert rows[1][:5] == [8970000, 80, 67710, 224.95e9, "cudaFuncCachePreferNone"]
    assert table.iloc[:, -1].isna().all()
    assert str(table["GPU Speed Of Light Throughput/Duration [ns]"].dtype) == "Int64"


def test_requested_raw_metric(fixtures_dir: Path) -> None:
    table = kernel_table(load(fixtures_dir / GOLD / "indexspaces_7dc4fa5_raw.csv"),
                         ["gpu__time_duration.sum", "dram__bytes_read.sum"])
    gold = json.loads((fixtures_dir / GOLD / "ncu_report_gold.json").read_text())["indexspaces_7dc4fa5"]
    assert table["gpu__time_duration.sum [ns]"].tolist() == [k["gpu__time_duration.sum"] for k in gold]
    # the auto-scaled page prints "1.310490" Gbyte: 6 decimals of the column's unit
    np.testing.assert_allclose(table["dram__bytes_read.sum [byte]"],
                               [k["dram__bytes_read.sum"] for k in gold], atol=500)


def test_metrics_table_several_ranks(fixtures_dir: Path, tmp_path: Path) -> None:
    rank0, rank1 = tmp_path / "echo_rank0.csv", tmp_path / "echo_rank1.log"
    shutil.copy(fixtures_dir / GOLD / "indexspaces_74de19f_details.csv", rank0)
    shutil.copy(fixtures_dir / B200, rank1)
    bad = tmp_path / "echo_rank2.csv"
    bad.write_text("kernel,time\nfoo,1\n")
    df, errors = metrics_table([rank0, bad, rank1], ["Launch Statistics/Registers Per Thread"])
    assert errors == [f"{bad}: not ncu --csv output (no header line with \"ID\" and \"Kernel Name\")"]
    assert list(df.columns) == ["rank", "file", *ECHO_COLUMNS,
                                "Launch Statistics/Registers Per Thread [register/thread]"]
    assert df["rank"].tolist() == [0, 0, 1]
    assert df["file"].tolist() == ["echo_rank0.csv"] * 2 + ["echo_rank1.log"]
    check(df[ECHO_COLUMNS], ECHO_74DE19F + ECHO_B200)
    assert df.iloc[:, -1].tolist() == [16, 80, 168]


def test_metrics_table_one_file_has_no_rank_column(fixtures_dir: Path) -> None:
    df, errors = metrics_table([fixtures_dir / B200])
    assert errors == [] and list(df.columns) == ECHO_COLUMNS


def test_metrics_table_unknown_metric_is_an_error(fixtures_dir: Path) -> None:
    df, errors = metrics_table([fixtures_dir / B200], ["Occupancy/Achieved Occupancy Typo"])
    assert errors == ["metric 'Occupancy/Achieved Occupancy Typo' not found in any input"]
    assert len(df) == 1


def test_metrics_table_nothing_readable(tmp_path: Path) -> None:
    df, errors = metrics_table([tmp_path / "a.csv", tmp_path / "b.csv"])
    assert df.empty and list(df.columns) == ECHO_COLUMNS
    assert errors == [f"{tmp_path / 'a.csv'}: no such file", f"{tmp_path / 'b.csv'}: no such file"]
