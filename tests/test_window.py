"""Metrics over the measured window: the timed iterations projected onto GPU
time, checked by hand on a small export, against nsys 2025.3.1's nvtx_gpu_proj_sum, on the
committed H200 exports (window idle small, capture idle large) and against HTA 0.5.0 (Kineto)."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from differential.hta_reference import hta_trace_analysis

from hpcprof.analysis.summary import tables_of
from hpcprof.run.results import write_table
from hpcprof.tools.nsys.analysis import distributed as dist
from hpcprof.tools.nsys.analysis import window as win
from hpcprof.tools.nsys.analysis.collect import NsysCollector, analyse_file
from hpcprof.tools.nsys.analysis.headline import nsys_metrics
from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.torch.analysis.collect import analyse_file as trace_file
from hpcprof.tools.torch.analysis.headline import torch_metrics

GEMM, NCCL = 525, 518       # StringIds of a GEMM and an NCCL kernel in h200_seqpar_bf16/rank0.sqlite
KERNEL, RUNTIME = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"


def _rows(con: sqlite3.Connection, table: str, rows: list[dict[str, object]]) -> None:
    """Replace `table`'s rows by copies of its first row with the given columns changed."""
    con.execute(f"CREATE TEMP TABLE tpl AS SELECT * FROM {table} LIMIT 1")
    con.execute(f"DELETE FROM {table}")
    for row in rows:
        con.execute(f"INSERT INTO {table} SELECT * FROM tpl")
        sets = ", ".join(f'"{c}" = ?' for c in row)
        con.execute(f"UPDATE {table} SET {sets} WHERE rowid = last_insert_rowid()", list(row.values()))
    con.execute("DROP TABLE tpl")


def small_export(fixtures_dir: Path, dest: Path) -> Path:
    """One thread: warmup [0,100] holding a warm-up iteration [10,20]; timed [200,300] holding
    iterations [210,220] and [250,260]; a teardown launch at 400. Kernels (ns): warm-up GEMM
    [1000,5000]; iteration 0: NCCL [6000,6500], GEMM [6600,8000]; iteration 1: GEMM [9000,9900],
    NCCL [9800,10000] (overlapping it by 100); teardown GEMM [20000,30000]."""
    shutil.copy(fixtures_dir / "nsys/h200_seqpar_bf16/rank0.sqlite", dest)
    con = sqlite3.connect(dest)
    gtid = con.execute(f"SELECT globalTid FROM {RUNTIME} LIMIT 1").fetchone()[0]
    gpid = gtid & ~0xFFFFFF
    ranges = [("warmup", 0, 100), ("iteration", 10, 20), ("timed", 200, 300), ("iteration", 210, 220),
              ("iteration", 250, 260)]
    _rows(con, "NVTX_EVENTS", [{"start": s, "end": e, "eventType": 59, "text": n, "textId": None,
                                "globalTid": gtid, "domainId": 0} for n, s, e in ranges])
    launches = [(15, 1000, 5000, GEMM), (212, 6000, 6500, NCCL), (215, 6600, 8000, GEMM),
                (255, 9000, 9900, GEMM), (258, 9800, 10000, NCCL), (400, 20000, 30000, GEMM)]
    _rows(con, RUNTIME, [{"start": t, "end": t + 1, "globalTid": gtid, "correlationId": i}
                         for i, (t, *_) in enumerate(launches, 1)])
    _rows(con, KERNEL, [{"start": s, "end": e, "correlationId": i, "globalPid": gpid, "deviceId": 0,
                         "streamId": 7, "demangledName": name, "shortName": name}
                        for i, (_, s, e, name) in enumerate(launches, 1)])
    for table in ("CUPTI_ACTIVITY_KIND_MEMSET", "PROFILER_OVERHEAD"):
        con.execute(f"DELETE FROM {table}")
    con.commit()
    con.close()
    return dest


def test_window_by_hand(fixtures_dir: Path, tmp_path: Path) -> None:
    tables = analyse_file(small_export(fixtures_dir, tmp_path / "rank0.sqlite"), 0)
    w = tables["window"].iloc[0]
    # the timed range's launches run on the GPU from 6000 to 10000; busy 500 + 1400 + [9000,10000]
    assert (w["window"], w["start_ns"], w["end_ns"], w["iterations"]) == ("nvtx:timed", 6000, 10000, 2)
    assert (w["busy_ns"], w["idle_ns"]) == (2900, 1100)
    its = tables["iterations"]
    assert its[["iteration", "start_ns", "end_ns", "gpu_ns", "busy_ns", "idle_ns"]].values.tolist() == [
        [0, 6000, 8000, 2000, 1900, 100], [1, 9000, 10000, 1000, 1000, 0]]
    kern = tables["kernels"].set_index("name")
    assert kern["total_ns"].to_dict() == {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": 2300,
                                          "ncclDevKernel_AllGather_RING_LL": 700}
    ov = tables["overlap"].iloc[0]
    assert (ov["comm_ns"], ov["compute_ns"], ov["overlap_ns"], ov["span_ns"], ov["idle_ns"]) == (700, 2300, 100, 4000, 1100)
    cap = tables["capture_overlap"].iloc[0]       # [1000, 30000]: busy 4000 + 500 + 1400 + 1000 + 10000
    assert (cap["span_ns"], cap["idle_ns"]) == (29000, 12100)
    phases = tables["phases"].set_index("range")
    assert phases.loc["iteration", "instances"] == 2 and "warmup" not in phases.index
    assert set(tables["phases"]["window"]) == {"nvtx:timed"}

    run = tmp_path / "run"
    for name, df in tables.items():
        write_table(run, f"nsys_{name}", df)
    metrics = {m: v for m, v, _ in nsys_metrics(tables_of(run))}
    assert metrics["window.duration"] == pytest.approx(0.004) and metrics["window.iterations"] == 2
    assert metrics["gpu.total"] == pytest.approx(0.003) and metrics["gpu.gemm.share"] == pytest.approx(230 / 3)
    assert metrics["idle_pct"] == pytest.approx(27.5) and metrics["overlap_pct"] == pytest.approx(100 / 7)
    assert metrics["capture.idle_pct"] == pytest.approx(100 * 12100 / 29000)
    assert metrics["capture.gpu.gemm"] == pytest.approx(0.0163)


def test_named_range_is_the_window(fixtures_dir: Path, tmp_path: Path) -> None:
    """A command workload's own range (profile.window.nvtx): each instance is one iteration."""
    tables = analyse_file(small_export(fixtures_dir, tmp_path / "rank0.sqlite"), 0, nvtx_window="warmup")
    w = tables["window"].iloc[0]
    assert (w["window"], w["start_ns"], w["end_ns"], w["iterations"]) == ("nvtx:warmup", 1000, 5000, 1)
    run = tmp_path / "run"                          # collect's case: the run's config.json names the range
    (run / "profiles/nsys").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"experiment": {"name": "w", "workload": {"kind": "command"}, "profile": {
        "tool": "nsys", "window": {"nvtx": "iteration"}}}, "site": {}, "sweep_point": {}}))   # the keys a record needs
    export = small_export(fixtures_dir, run / "profiles/nsys/rank0.sqlite")
    its = analyse_file(export, 0)["iterations"]
    assert set(its["window"]) == {"nvtx:iteration"} and its["start_ns"].tolist() == [1000, 6000, 9000]


def test_window_equals_nsys_nvtx_gpu_proj_sum(gpu_data: Path) -> None:
    """The window is nsys 2025.3.1's projection of seqpar's `timed` range, and the projections of
    every `iteration` instance add up to nsys's (tests/fixtures/gpu/run1, fp32 on 2 H200s)."""
    base = gpu_data / "run1/nsys/seqpar_float32_p2_rank0"
    gold = pd.read_csv(f"{base}_nvtx_gpu_proj_sum.csv").set_index("Range")
    with Export(f"{base}.sqlite") as export:
        act = dist.load_activity([export], {str(export.path): 0})
        window = win.find_window(act)
        instances = window.instances
        w = win.window_summary(act, window).to_pylist()[0]      # an Arrow table, as collect writes it
    assert w["window"] == "nvtx:timed"
    assert w["duration_ns"] == gold.loc[":timed", "Total Proj Time (ns)"] == 1590060533
    its = instances[instances["range"] == "iteration"]["proj_ns"]
    assert (its.sum(), its.min(), its.max(), len(its)) == (
        gold.loc[":iteration", "Total Proj Time (ns)"], gold.loc[":iteration", "Proj Min (ns)"],
        gold.loc[":iteration", "Proj Max (ns)"], gold.loc[":iteration", "Range Instances"])
    assert w["iterations"] == 100                         # the timed ones of 120 (20 warm-up)


def test_h200_fp32_window_idle_small_capture_idle_large(fixtures_dir: Path, tmp_path: Path) -> None:
    """seqpar float32 on 2 H200s, whole capture (start-up, warm-up, NCCL set-up and teardown):
    the capture's idle is large; the timed iterations keep the GPU busy."""
    tables = analyse_file(fixtures_dir / "nsys/h200_campaign/seqpar_fp32_p2_rank1.sqlite", 1)
    run = tmp_path / "run"
    for name, df in tables.items():
        write_table(run, f"nsys_{name}", df)
    metrics = {m: v for m, v, _ in nsys_metrics(tables_of(run))}
    assert metrics["idle_pct"] < 1.0 and metrics["capture.idle_pct"] > 50.0
    assert round(metrics["idle_pct"], 3) == 0.227 and round(metrics["capture.idle_pct"], 1) == 65.0
    assert metrics["window.iterations"] == 30
    assert metrics["gpu.gemm.share"] > 95 > metrics["capture.gpu.gemm.share"]
    its = tables["iterations"]
    assert its["gpu_ns"].between(15.8e6, 16.0e6).all()           # 15.85 ms GPU iterations
    timeline = NsysCollector().reduce(lambda n: tables.get(n), print)["timeline"]
    phases = timeline[timeline["kind"] == "phase"]
    assert phases["range"].tolist()[:2] == ["iteration", "allgather"]
    assert phases["end_ms"].max() == pytest.approx(its["gpu_ns"].median() / 1e6, rel=1e-3)


def test_median_iteration_on_gpu_time_aligned_across_ranks(fixtures_dir: Path) -> None:
    """bf16 on 2 H200s: the timeline is the same (median) iteration on both ranks, each from
    its own first GPU start, 1.39 ms long on the GPU (the CPU ranges last 0.45-0.76 ms)."""
    run = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    parts = [analyse_file(run / f"rank{r}.sqlite", r) for r in (0, 1)]

    def read(name: str) -> pd.DataFrame:
        return pd.concat([p[name] for p in parts], ignore_index=True)

    timeline = NsysCollector().reduce(read, print)["timeline"]
    its = read("iterations")
    assert set(timeline["iteration"]) == {3}       # slowest-rank lengths 38.0 (capture start), 1.389, 1.394, 1.395, 1.396 ms
    for rank in (0, 1):
        t = timeline[timeline["rank"] == rank]
        assert t["range"].tolist()[:7] == ["step3", "allgather", "NCCL:ncclAllGather", "matmul1", "matmul2",
                                           "reduce_scatter", "NCCL:ncclReduceScatter"]
        assert t["kind"].tolist()[7:] == ["kernel"] * 4 and t["start_ms"].min() == 0
        length = its[(its["rank"] == rank) & (its["iteration"] == 3)]["gpu_ns"].iloc[0] / 1e6
        assert t["end_ms"].max() == pytest.approx(length) and 1.38 < length < 1.40


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", ["h200_seqpar_bf16", "h200_ddp_gpt2"])
def test_kineto_window_against_hta(fixtures_dir: Path, tmp_path: Path, name: str) -> None:
    """The ProfilerStep window of real H200 traces: here the steps span the traced GPU work, so
    its length and idle time are HTA 0.5.0's temporal breakdown's (run on the same files)."""
    logging.disable(logging.WARNING)
    directory = fixtures_dir / "hta" / name
    hta = hta_trace_analysis(directory).get_temporal_breakdown(visualize=False).set_index("rank")
    run = tmp_path / "run"
    windows, iterations = [], []
    for rank in (0, 1):
        tables = trace_file(directory / f"rank{rank}.pt.trace.json.gz", rank)
        w = tables["window"].iloc[0]
        assert w["window"] == "ProfilerStep" and w["iterations"] == len(tables["iterations"]) >= 1
        assert w["duration_ns"] == hta.loc[rank, "kernel_time(us)"] * 1000
        assert abs(w["idle_ns"] - hta.loc[rank, "idle_time(us)"] * 1000) <= 0.001 * w["duration_ns"]
        its = tables["iterations"]
        assert (its["busy_ns"] + its["idle_ns"] == its["gpu_ns"]).all()
        windows.append(tables["window"])
        iterations.append(its)
    write_table(run, "torch_window", pd.concat(windows, ignore_index=True))
    metrics = {m: v for m, v, _ in torch_metrics(tables_of(run))}
    idle = pd.concat(windows)
    assert metrics["idle_pct"] == pytest.approx(100 * idle["idle_ns"].sum() / idle["span_ns"].sum())


NSYS_2022 = Path("/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")


@pytest.mark.slow   # nsys 2022.4
@pytest.mark.parametrize("export", ["small", "nsys/h200_campaign/seqpar_fp32_p2_rank1.sqlite"])
def test_window_and_iterations_equal_nsys_2022_projection(fixtures_dir: Path, tmp_path: Path, export: str) -> None:
    """nsys 2022.4's `nvtxgpuproj` (one row per NVTX range instance, projected onto the GPU;
    installed by tests/services/nsys.sh): its `timed` row is the window and its `iteration` rows
    inside it are the iterations, on the small export and on the H200 float32 capture."""
    import subprocess

    if not NSYS_2022.exists():
        pytest.skip("nsys 2022.4 not installed (tests/services/nsys.sh)")
    db = small_export(fixtures_dir, tmp_path / "rank0.sqlite") if export == "small" else fixtures_dir / export
    subprocess.run([str(NSYS_2022), "stats", "--report", "nvtxgpuproj", "--format", "csv", "--output",
                    str(tmp_path / "proj"), str(db)], check=True, capture_output=True, text=True)
    proj = pd.read_csv(tmp_path / "proj_nvtxgpuproj.csv")
    timed = proj[proj["Name"] == "timed"].iloc[0]
    inside = proj[(proj["Name"] == "iteration") & (pd.to_numeric(proj["ParentId"]) == timed["RangeId"])]
    tables = analyse_file(db, 0)
    w = tables["window"].iloc[0]
    assert (w["start_ns"], w["duration_ns"]) == (timed["Projected Start (ns)"], timed["Projected Duration (ns)"])
    its = tables["iterations"]
    assert its["start_ns"].tolist() == inside["Projected Start (ns)"].tolist()
    assert its["gpu_ns"].tolist() == inside["Projected Duration (ns)"].tolist()
    assert len(its) == (2 if export == "small" else 30)


def test_kineto_window_by_hand(tmp_path: Path) -> None:
    """ProfilerStep#1 [0,100) and #2 [100,200) µs; #3 (the last) is dropped as HTA does. Step 1
    launches a GEMM [10,40) and an NCCL kernel [30,60); step 2 a GEMM [120,150); a kernel launched
    before the steps [0,5) is outside the window. Window [10,150): busy 50 + 30, idle 60."""
    def cpu(name: str, ts: float, dur: float, corr: int = -1) -> dict:
        return {"ph": "X", "cat": "cpu_op" if corr < 0 else "cuda_runtime", "name": name, "ts": ts, "dur": dur,
                "pid": 1, "tid": 1, **({"args": {"correlation": corr}} if corr >= 0 else {})}

    def kernel(name: str, ts: float, dur: float, corr: int) -> dict:
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7,
                "args": {"stream": 7, "correlation": corr}}

    events = [cpu("cudaLaunchKernel", 0, 0.5, 1), kernel("sgemm_128x128", 0, 5, 1),
              cpu("ProfilerStep#1", 1, 99), cpu("ProfilerStep#2", 100, 100), cpu("ProfilerStep#3", 200, 50),
              cpu("cudaLaunchKernel", 2, 1, 2), kernel("sgemm_128x128", 10, 30, 2),
              cpu("cudaLaunchKernel", 4, 1, 3), kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 30, 30, 3),
              cpu("cudaLaunchKernel", 110, 1, 4), kernel("sgemm_128x128", 120, 30, 4)]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    tables = trace_file(path, 0)
    w = tables["window"].iloc[0]
    assert (w["window"], w["iterations"], w["duration_ns"], w["busy_ns"], w["idle_ns"]) == (
        "ProfilerStep", 2, 140_000, 80_000, 60_000)
    assert (w["comm_ns"], w["compute_ns"], w["overlap_ns"]) == (30_000, 60_000, 10_000)
    its = tables["iterations"]
    assert its[["iteration", "gpu_ns", "busy_ns", "idle_ns"]].values.tolist() == [[1, 50_000, 50_000, 0],
                                                                              [2, 30_000, 30_000, 0]]


def test_a_sub_microsecond_event_covers_nothing_on_htas_grid() -> None:
    """On HTA's whole-µs grid a 0.4 µs kernel at 10.3 µs becomes [11, 10): it covers nothing. Found
    on the H200 GPT-2 and ResNet-50 traces (benchmarks/gpu/trainers_check.py): such events had
    counted as negative busy time, idle % over the window 0.03-0.1 points high."""
    from hpcprof.tools.torch.analysis.window import _covered, _union

    ts, end = np.array([0.0, 11.0, 20.0]), np.array([5.0, 10.0, 25.0])   # the middle one inverted
    assert _covered(_union(ts, end), 0.0, 30.0) == 10.0
