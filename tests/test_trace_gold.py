"""hpcprof's trace analyses against the outputs of HTA 0.5.0 stored in fixtures/hta/gold_hta."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcprof.tools.torch.analysis import analyses as A
from hpcprof.tools.torch.analysis.load import RankTrace, load_traces


def _load(path: Path) -> list[RankTrace]:
    traces, errors = load_traces([path])
    assert not errors
    return traces


@pytest.fixture(scope="module")
def hta(fixtures_dir: Path) -> Path:
    return fixtures_dir / "hta"


@pytest.fixture(scope="module")
def gold(hta: Path) -> dict:
    out = {}
    for name in ("hta0.5.0_trace_filter.json",
                 "hta0.5.0_ns_resolution_nccl_parser_trace_compare.json"):
        out.update(json.loads((hta / "gold_hta" / name).read_text()))
    return out


@pytest.fixture(scope="module")
def trace_filter(hta: Path) -> list[RankTrace]:
    return _load(hta / "trace_filter")


@pytest.fixture(scope="module")
def ns_resolution(hta: Path) -> list[RankTrace]:
    return _load(hta / "ns_resolution_trace")


@pytest.fixture(scope="module")
def nccl(hta: Path) -> list[RankTrace]:
    return _load(hta / "nccl_parser_config")


def _same(ours: pd.DataFrame, records: list[dict], columns: list[str] | None = None) -> None:
    expected = pd.DataFrame(records)
    columns = columns or list(expected.columns)
    pd.testing.assert_frame_equal(ours[columns].reset_index(drop=True),
                                  expected[columns].reset_index(drop=True),
                                  check_dtype=False, rtol=1e-9)


@pytest.mark.parametrize("fixture, key", [
    ("trace_filter", "trace_filter"),
    ("ns_resolution", "ns_resolution"),
    ("nccl", "nccl_parser_config"),
])
def test_temporal_breakdown(fixture: str, key: str, gold: dict,
                            request: pytest.FixtureRequest) -> None:
    _same(A.temporal_breakdown(request.getfixturevalue(fixture)).frame(),
          gold[f"{key}.temporal_breakdown"])


@pytest.mark.parametrize("fixture, key", [("trace_filter", "trace_filter"),
                                          ("nccl", "nccl_parser_config")])
def test_comm_comp_overlap(fixture: str, key: str, gold: dict,
                           request: pytest.FixtureRequest) -> None:
    _same(A.comm_comp_overlap(request.getfixturevalue(fixture)).frame(), gold[f"{key}.comm_comp_overlap"])


@pytest.mark.parametrize("fixture, key", [
    ("trace_filter", "trace_filter"),
    ("ns_resolution", "ns_resolution"),
    ("nccl", "nccl_parser_config"),
])
def test_kernel_type_breakdown(fixture: str, key: str, gold: dict,
                               request: pytest.FixtureRequest) -> None:
    _same(A.kernel_type_breakdown(request.getfixturevalue(fixture)).frame(),
          gold[f"{key}.kernel_type_breakdown"])


def test_kernel_type_breakdown_per_rank_adds_up(trace_filter: list[RankTrace],
                                                gold: dict) -> None:
    per_rank = A.kernel_type_breakdown(trace_filter, per_rank=True).frame()
    summed = per_rank.groupby("kernel_type")["sum"].sum()
    expected = pd.DataFrame(gold["trace_filter.kernel_type_breakdown"]).set_index("kernel_type")
    assert summed.to_dict() == expected["sum"].to_dict()
    assert per_rank.groupby("rank")["percentage"].sum().round(0).tolist() == [100, 100]


def test_kernel_breakdown(trace_filter: list[RankTrace], gold: dict) -> None:
    """Every column of every row as HTA 0.5.0 (collapsed types recomputed from kernel totals)."""
    expected = pd.DataFrame(gold["trace_filter.kernel_breakdown_head"])  # first 30 rows
    ours = A.kernel_breakdown(trace_filter).frame().head(len(expected))
    _same(ours, gold["trace_filter.kernel_breakdown_head"])


def test_kernel_breakdown_instance_stats_option(trace_filter: list[RankTrace]) -> None:
    """The named deviation `instance_stats`: where HTA 0.5.0 shows max = min = mean = sum for a
    kept kernel of a collapsed type, hpcprof keeps the statistics of its instances and gives
    "others" those of all the collapsed instances."""
    rank1 = trace_filter[1].gpu.frame()
    name = "ampere_sgemm_128x64_nn"
    durations = rank1.loc[rank1["name"] == name, "dur"]
    hta = A.kernel_breakdown(trace_filter).frame().query("name == @name and rank == 1").iloc[0]
    assert (hta["max (us)"], hta["min (us)"], hta["mean (us)"], hta["stddev"]) == (1956, 1956, 1956, 0)
    row = A.kernel_breakdown(trace_filter, instance_stats=True).frame().query("name == @name and rank == 1").iloc[0]
    assert len(durations) == 4 and row["sum (us)"] == 1956
    assert (row["max (us)"], row["min (us)"], row["mean (us)"]) == (
        durations.max(), durations.min(), durations.mean())
    assert row["stddev"] == pytest.approx(durations.std())

    table = A.kernel_breakdown(trace_filter, instance_stats=True).frame()
    comp = table[(table["rank"] == 0) & (table["kernel_type"] == "COMPUTATION")]
    kept = comp.loc[comp["name"] != "others", "name"]
    is_comp = A._types(trace_filter[0].gpu) == A.COMP
    gpu = trace_filter[0].gpu.frame()
    others = gpu.loc[is_comp & ~gpu["name"].isin(kept).to_numpy(), "dur"]
    row = comp[comp["name"] == "others"].iloc[0]
    assert (row["sum (us)"], row["max (us)"], row["min (us)"]) == (
        others.sum(), others.max(), others.min())
    assert row["mean (us)"] == pytest.approx(others.mean())


@pytest.mark.parametrize("rank", [0, 1])
def test_idle_time_breakdown_trace_filter(rank: int, trace_filter: list[RankTrace],
                                          gold: dict) -> None:
    ours = A.idle_time_breakdown(trace_filter).frame()
    _same(ours[ours["rank"] == rank], gold[f"trace_filter.idle_time_breakdown.rank{rank}"])


def test_idle_time_breakdown_ns_resolution(ns_resolution: list[RankTrace], gold: dict) -> None:
    _same(A.idle_time_breakdown(ns_resolution).frame(), gold["ns_resolution.idle_time_breakdown.rank0"])


def test_idle_interval_stats_agree_with_breakdown(trace_filter: list[RankTrace]) -> None:
    stats = A.idle_interval_stats(trace_filter)
    breakdown = A.idle_time_breakdown(trace_filter).frame()
    assert list(stats.columns) == ["rank", "stream", "idle_category", "count", "mean", "std",
                                   "min", "25%", "50%", "75%", "max"]
    merged = breakdown.merge(stats, on=["rank", "stream", "idle_category"])
    assert len(merged) == len(breakdown)
    totals = (merged["count"] * merged["mean"]).fillna(0)
    np.testing.assert_allclose(totals, merged["idle_time"], atol=0.01 * merged["count"].max())


def test_kernel_launch_stats(trace_filter: list[RankTrace], gold: dict) -> None:
    expected = gold["trace_filter.kernel_launch_stats.rank0.summary"]
    stats = A.kernel_launch_stats(trace_filter).frame()
    rank0 = stats[stats["rank"] == 0]
    assert len(rank0) == expected["rows"]
    for col in ("cpu_duration", "gpu_duration", "launch_delay"):
        assert rank0[col].sum() == expected[f"{col}_sum"]
    _same(rank0.head(5), expected["first5"])
    assert set(stats["rank"]) == {0, 1}


def test_kernel_launch_cutoffs(trace_filter: list[RankTrace]) -> None:
    stats = A.kernel_launch_stats(trace_filter, runtime_cutoff=10, launch_delay_cutoff=1000).frame()
    assert (stats["short_kernel"] == ((stats["cpu_duration"] <= 10)
                                      & (stats["gpu_duration"] < stats["cpu_duration"]))).all()
    assert (stats["runtime_outlier"] == (stats["cpu_duration"] > 10)).all()
    assert (stats["launch_delay_outlier"] == (stats["launch_delay"] > 1000)).all()
    assert stats["launch_delay"].min() >= 0
    without_memory = A.kernel_launch_stats(trace_filter, include_memory_events=False)
    assert 0 < len(without_memory) < len(stats)


@pytest.mark.parametrize("fixture, key", [
    ("ns_resolution", "ns_resolution"),
    ("nccl", "nccl_parser_config"),
])
def test_profiler_steps_drop_the_last(fixture: str, key: str, gold: dict,
                                      request: pytest.FixtureRequest) -> None:
    assert request.getfixturevalue(fixture)[0].profiler_steps == gold[f"{key}.profiler_steps"]


def test_profiler_steps_trace_filter(trace_filter: list[RankTrace], gold: dict) -> None:
    assert [t.rank for t in trace_filter] == gold["trace_filter.ranks"]
    for t in trace_filter:
        assert t.profiler_steps == [int(s) for s in gold["trace_filter.profiler_steps"]]


@pytest.mark.parametrize("name, kind", [
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     "COMMUNICATION"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "COMMUNICATION"),
    ("Memcpy DtoD (Device -> Device)", "MEMORY"),
    ("Memset (Device)", "MEMORY"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
     "COMPUTATION"),
    ("Event Sync", "OTHER"),
    ("void at::native::copy_Memcpy_like_kernel", "OTHER"),  # HTA 0.5.0: '.*Memcpy' is not compute
])
def test_kernel_type_is_hta_050s(name: str, kind: str) -> None:
    assert A.kernel_type(name) == kind
