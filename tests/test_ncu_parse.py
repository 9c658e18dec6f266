"""Parsing ncu --csv pages (2022 and 2025 layouts), unit conversion and bad input, on real fixtures."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.tools.ncu.analysis.parse import (
    LONG_COLUMNS,
    NcuInputError,
    load,
    parse_number,
    read_ncu_csv,
    to_base_unit,
)

GOLD = "ncu/gold_ncu_2022.3"
REPORTS = ["indexspaces_74de19f", "indexspaces_7dc4fa5"]

# Rows of `ncu --import indexspaces_74de19f.ncu-rep --csv --page details` by Nsight Compute
# 2025.3.1 (kernel 0, a subset of its rows, unchanged): the 2025 layout, thousands separators,
# short metric rows, "us" and "Gbyte/s" units.
NCU_2025_DETAILS = r""""ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","GPU Speed Of Light Throughput","Elapsed Cycles","cycle","595,445",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","GPU Speed Of Light Throughput","Memory Throughput","%","95.70",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","GPU Speed Of Light Throughput","DRAM Throughput","%","95.70",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","GPU Speed Of Light Throughput","Duration","us","459.46",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","GPU Speed Of Light Throughput","SM Active Cycles","cycle","590,527.94",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","GPU Speed Of Light Throughput","Compute (SM) Throughput","%","17.56",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","SpeedOfLight","","","","SOLBottleneck","INF","The kernel is utilizing greater than 80.0% of the available compute or memory performance of the device. To further improve performance, work will likely need to be shifted from the most utilized to another unit. Start by analyzing DRAM in the Memory Workload Analysis section.","",""
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","Memory Workload Analysis","Memory Throughput","Gbyte/s","661.05",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","Memory Workload Analysis","L1/TEX Hit Rate","%","0",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","Memory Workload Analysis","L2 Hit Rate","%","99.94",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","Launch Statistics","Grid Size","","258,048",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","Launch Statistics","Registers Per Thread","register/thread","16",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","Launch Statistics","Threads","thread","66,060,288",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","Occupancy","Theoretical Occupancy","%","100",
"0","69163","julia","127.0.0.1","julia__5_6739(CuKernelContext, CuDeviceArray<Int4x8, 1, 1>, Int4x8)","1","13","(256, 1, 1)","(258048, 1, 1)","0","8.6","Occupancy","Achieved Occupancy","%","69.95",
"""


def printed_tolerance(text: str, unit: str) -> float:
    """Half a unit of the last printed digit of `text`, in base units."""
    decimals = len(text.replace(",", "").partition(".")[2])
    return to_base_unit(0.5 * 10.0**-decimals, unit)[0]


def base_values(long: pd.DataFrame) -> dict[tuple[int, str], tuple[float, str, float]]:
    """(ID, metric) -> (value in base units, base unit, printed tolerance) of numeric metrics."""
    out = {}
    for kid, metric, unit, text in zip(long["ID"], long["Metric Name"], long["Metric Unit"],
                                       long["Metric Value"], strict=True):
        number = parse_number(text)
        if number is not None:
            value, base = to_base_unit(number, unit)
            out[(kid, metric)] = (value, base, printed_tolerance(text, unit))
    return out


@pytest.mark.parametrize("text, expected", [
    ("17,984", 17984.0), ("1,215,000,000.00", 1215000000.0), ("595,445", 595445.0),
    ("590,527.94", 590527.94), ("0.74", 0.74), ("100", 100.0), ("-3.5", -3.5),
    ("", None), ("cudaFuncCachePreferNone", None), ("(384, 1, 1)", None), ("n/a", None),
    ("1,23", None),
])
def test_parse_number(text: str, expected: float | None) -> None:
    assert parse_number(text) == expected


@pytest.mark.parametrize("value, unit, expected", [
    (459.46, "usecond", (459460.0, "ns")), (459.46, "us", (459460.0, "ns")),
    (8.97, "msecond", (8970000.0, "ns")), (0.459456, "ms", (459456.0, "ns")),
    (406240, "ns", (406240.0, "ns")), (1.69, "Gbyte", (1.69e9, "byte")),
    (8.19, "Kbyte", (8190.0, "byte")), (1.02, "Kbyte/block", (1020.0, "byte/block")),
    (661.05, "Gbyte/second", (6.6105e11, "byte/s")), (661.05, "Gbyte/s", (6.6105e11, "byte/s")),
    (7.2, "cycle/nsecond", (7.2e9, "cycle/s")), (999.407799, "cycle/usecond", (999407799.0, "cycle/s")),
    (7.2, "Ghz", (7.2e9, "hz")), (3995313115.40, "hz", (3995313115.40, "hz")),
    (1.5, "sector/msecond", (1500.0, "sector/s")), (17.56, "%", (17.56, "%")),
    (16, "register/thread", (16, "register/thread")), (0.71, "inst/cycle", (0.71, "inst/cycle")),
    (3, "", (3, "")),
])
def test_to_base_unit(value: float, unit: str, expected: tuple[float, str]) -> None:
    assert to_base_unit(value, unit) == expected


def test_details_2022_layout(fixtures_dir: Path) -> None:
    long = load(fixtures_dir / GOLD / "indexspaces_74de19f_details.csv")
    assert list(long.columns) == LONG_COLUMNS
    with open(fixtures_dir / GOLD / "indexspaces_74de19f_details.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    metric_rows = [r for r in rows if r["Metric Name"]]
    assert len(long) == len(metric_rows) == 116          # the 18 rule rows are dropped
    assert long["ID"].tolist() == [int(r["ID"]) for r in metric_rows]
    first = long.iloc[0]
    assert first["Section Name"] == "GPU Speed Of Light Throughput"
    assert (first["Metric Name"], first["Metric Unit"], first["Metric Value"]) == \
        ("DRAM Frequency", "cycle/nsecond", "7.20")
    duration = long[(long["Metric Name"] == "Duration")]
    assert duration[["Metric Unit", "Metric Value"]].values.tolist() == \
        [["usecond", "459.46"], ["msecond", "8.97"]]


def test_details_2025_layout_from_b200_log(fixtures_dir: Path) -> None:
    """superbench's log: ==PROF== and program lines first, metric rows of 16 of 20 fields."""
    long = load(fixtures_dir / "ncu/superbench_cublaslt_ncu_b200.log")
    assert len(long) == 50 and set(long["ID"]) == {0}
    value = long.set_index(["Section Name", "Metric Name"])["Metric Value"]
    assert value["GPU Speed Of Light Throughput", "DRAM Throughput"] == "0.74"  # upstream assert
    assert value["GPU Speed Of Light Throughput", "Duration"] == "406240"
    assert value["Launch Statistics", "Registers Per Thread"] == "168"
    assert value["Occupancy", "Theoretical Occupancy"] == "18.75"
    assert "SOLBottleneck" not in set(long["Metric Name"])


def test_details_2025_layout_thousands_separators() -> None:
    long = read_ncu_csv(NCU_2025_DETAILS)
    value = dict(zip(long["Metric Name"] + "|" + long["Metric Unit"], long["Metric Value"], strict=True))
    assert len(long) == 14
    assert parse_number(value["Elapsed Cycles|cycle"]) == 595445
    assert parse_number(value["Threads|thread"]) == 66060288
    assert parse_number(value["SM Active Cycles|cycle"]) == 590527.94
    assert to_base_unit(parse_number(value["Duration|us"]), "us") == (459460.0, "ns")
    assert to_base_unit(parse_number(value["Memory Throughput|Gbyte/s"]), "Gbyte/s") == \
        (661.05e9, "byte/s")


def test_2025_and_2022_details_agree(fixtures_dir: Path) -> None:
    """The same report exported by ncu 2022.3 (gold) and 2025.3.1 gives the same numbers."""
    new = base_values(read_ncu_csv(NCU_2025_DETAILS))
    old = base_values(load(fixtures_dir / GOLD / "indexspaces_74de19f_details.csv"))
    renamed = {"Memory Throughput": "Memory [%]", "Compute (SM) Throughput": "Compute (SM) [%]"}
    for (kid, metric), (value, unit, tol) in new.items():
        key = (kid, renamed.get(metric, metric) if unit == "%" else metric)
        assert old[key][0] == pytest.approx(value, abs=tol + old[key][2]), key


@pytest.mark.parametrize("report", REPORTS)
def test_raw_pages_auto_and_base_units_agree(fixtures_dir: Path, report: str) -> None:
    auto = load(fixtures_dir / GOLD / f"{report}_raw.csv")
    base = load(fixtures_dir / GOLD / f"{report}_raw_baseunits.csv")
    assert auto["Section Name"].eq("").all()
    assert auto["Metric Unit"].str.contains("Gbyte|Mbyte|msecond").any()
    a, b = base_values(auto), base_values(base)
    assert a.keys() == b.keys() and len(a) > 700 * auto["ID"].nunique()
    for key, (value, unit, tol) in a.items():
        assert unit == b[key][1], key
        assert value == pytest.approx(b[key][0], abs=tol + b[key][2], rel=1e-12), key


@pytest.mark.slow
@pytest.mark.parametrize("report", REPORTS)
def test_raw_pages_match_ncu_report_gold(fixtures_dir: Path, report: str) -> None:
    """Every metric that ncu_report read from the .ncu-rep, from both raw exports."""
    gold = json.loads((fixtures_dir / GOLD / "ncu_report_gold.json").read_text())[report]
    for name in ("raw", "raw_baseunits"):
        long = load(fixtures_dir / GOLD / f"{report}_{name}.csv")
        values = base_values(long)
        text = long.set_index(["ID", "Metric Name"])["Metric Value"]
        for kernel in gold:
            kid = kernel["action"]
            device = kernel["device__attribute_display_name"]
            assert text[kid, "device__attribute_display_name"] == device
            for metric, expected in kernel.items():
                if "__" in metric and metric != "device__attribute_display_name":
                    value, _, tol = values[(kid, metric)]
                    assert value == pytest.approx(expected, abs=tol), (name, kid, metric)
    base = base_values(load(fixtures_dir / GOLD / f"{report}_raw_baseunits.csv"))
    for kernel in gold:                                # base units print times and bytes exactly
        for metric in ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"):
            assert base[(kernel["action"], metric)][0] == kernel[metric]


@pytest.mark.parametrize("report", REPORTS)
def test_raw_page_reproduces_summary_per_kernel(fixtures_dir: Path, report: str) -> None:
    """`--print-summary per-kernel` gold: each row's min/max/avg is the kernel's raw value."""
    long = load(fixtures_dir / GOLD / f"{report}_raw.csv")
    values = base_values(long)
    grid = long[long["Metric Name"] == "launch__grid_size"]
    kernel_id = {(name, int(size)): kid
                 for kid, name, size in zip(grid["ID"], grid["Kernel Name"], grid["Metric Value"], strict=True)}
    with open(fixtures_dir / GOLD / f"{report}_summary_per_kernel.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 57 * len(kernel_id)
    for row in rows:
        assert row["Invocations"] == "1"
        kid = kernel_id[row["Kernel Name"], int(row["Grid Size"])]
        value, unit, tol = values[(kid, row["Metric Name"])]
        for stat in ("Minimum", "Maximum", "Average"):
            expected, expected_unit = to_base_unit(parse_number(row[stat]), row["Metric Unit"])
            tol_gold = printed_tolerance(row[stat], row["Metric Unit"])
            assert unit == expected_unit
            assert value == pytest.approx(expected, abs=tol + tol_gold, rel=1e-12), row


def _cut(text: str, marker: str) -> str:
    return text[: text.index(marker)]


@pytest.mark.parametrize("make, message", [
    (lambda d: "", "empty file"),
    (lambda d: "\n  \n", "empty file"),
    (lambda d: "name,value\nfoo,1\n", "not ncu --csv output"),
    (lambda d: '"ID","Name"\n"1","x"\n', "not ncu --csv output"),
    (lambda d: "==PROF== Disconnected from process 1\n", "not ncu --csv output"),
    (lambda d: d[: d.index("\n") + 1], "no kernel results"),
    (lambda d: d[:5000], "truncated"),
    (lambda d: d.replace('"7.20",', '"7.20","x","y","z","w","v"', 1), "malformed or truncated row"),
    (lambda d: d[: d.index("\n") + 90] + "\n", "malformed or truncated row"),
    (lambda d: d.replace('"0","69163"', '"x","69163"', 1), "non-numeric kernel ID"),
])
def test_bad_details_input(fixtures_dir: Path, tmp_path: Path, make, message: str) -> None:
    good = (fixtures_dir / GOLD / "indexspaces_74de19f_details.csv").read_text()
    path = tmp_path / "bad.csv"
    path.write_text(make(good))
    with pytest.raises(NcuInputError) as err:
        load(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_raw_and_summary_input(fixtures_dir: Path, tmp_path: Path) -> None:
    raw = (fixtures_dir / GOLD / "indexspaces_74de19f_raw.csv").read_text().splitlines(keepends=True)
    cases = {
        "no_units.csv": (raw[0] + raw[2], "without its units row"),
        "units_only.csv": (raw[0] + raw[1], "no kernel results"),
        "short.csv": (raw[0] + raw[1] + raw[2][:2000] + "\n", "malformed or truncated row"),
        "summary.csv": ((fixtures_dir / GOLD / "indexspaces_74de19f_summary_per_kernel.csv").read_text(),
                        "--print-summary"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(NcuInputError, match=message):
            load(tmp_path / name)
    (tmp_path / "binary.csv").write_bytes(b"\x00\xff\xfe ncu")
    with pytest.raises(NcuInputError, match="not UTF-8"):
        load(tmp_path / "binary.csv")
    with pytest.raises(NcuInputError, match="no such file"):
        load(tmp_path / "missing.csv")


def test_program_output_and_ncu_lines_around_the_csv(fixtures_dir: Path) -> None:
    details = (fixtures_dir / GOLD / "indexspaces_74de19f_details.csv").read_text()
    expected = read_ncu_csv(details)
    live = ("==PROF== Connected to process 69163\nstep 1 loss 0.5\n" + details
            + "==WARNING== Found outstanding GPU clock reset, trying to revert...Success.\n")
    pd.testing.assert_frame_equal(read_ncu_csv(live), expected)
    pd.testing.assert_frame_equal(read_ncu_csv(details.replace("\n", "\r\n")), expected)
