"""The HTML report: one self-contained file (plotly's JS inline, no CDN) with the figures of a
sweep and of each run, from the runs' result tables."""

from __future__ import annotations

import html
from collections.abc import Iterator

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from hpcprof.analysis.summary import counted, kernel_category
from hpcprof.report import plots
from hpcprof.report.compare import (
    RunInfo,
    comparison,
    fold_repetitions,
    metric_columns,
    param_columns,
    point_labels,
)
from hpcprof.report.terminal import format_value, with_unit
from hpcprof.results import read_table

#: sweep metrics drawn against the swept parameters (prefixes of metric names)
SWEEP_METRICS = ("iteration.mean", "phase.", "gpu.", "overlap_pct", "idle_pct", "slowest_rank.excess_pct")
#: ncu's Echo columns drawn as speed-of-light bars (by name prefix)
SOL_COLUMNS = ("Compute throughput", "Memory throughput", "DRAM throughput", "Achieved occupancy")


#: dense peak TFLOP/s per precision and NVLink GB/s per direction, from NVIDIA's SXM datasheets
PEAKS = {"H200": {"float32": 67.0, "bfloat16": 989.4, "float16": 989.4, "nvlink": 450.0},
         "H100": {"float32": 67.0, "bfloat16": 989.4, "float16": 989.4, "nvlink": 450.0},
         "A100": {"float32": 19.5, "bfloat16": 312.0, "float16": 312.0, "nvlink": 300.0}}


def device_peaks(info: RunInfo) -> dict[str, float]:
    """The peaks of the run's GPU (by the device name rank 0 reported), {} when unknown."""
    ranks = read_table(info.run.path, "workload_seqpar.ranks")
    if ranks is None or ranks.empty:
        return {}
    name = str(ranks["device_name"].iloc[0])
    return next((peaks for key, peaks in PEAKS.items() if key in name), {})


def sweep_figures(infos: list[RunInfo]) -> Iterator[go.Figure]:
    """Each headline metric against the swept parameter(s), when the runs differ in one."""
    df = fold_repetitions(comparison(infos))
    params = param_columns(df)
    df = df[df[params].notna().all(axis=1)] if params else df
    if len(df) < 2 or not params:
        return
    label = ", ".join(params) if len(params) > 1 else params[0]
    df = df.assign(**{label: point_labels(df, params)}) if len(params) > 1 else df
    for col in metric_columns(df):
        if col.startswith(SWEEP_METRICS) and not col.endswith(("share [%]",)) and df[col].notna().sum() > 1:
            sd = f"{col} sd" if f"{col} sd" in df else None
            yield plots.metric_vs_param(df, label, col, sd, f"{col} against {label}")


def workload_figures(info: RunInfo) -> Iterator[go.Figure]:
    """seqpar / ddp: per-phase time per rank; seqpar: TFLOP/s and bus bandwidth per phase."""
    tables = {"seqpar": ("workload_seqpar.iterations", "workload_seqpar.phases"),
              "ddp": ("workload_ddp_steps.steps", "workload_ddp_steps.phases")}.get(info.kind)
    if tables is None:
        return
    rows = read_table(info.run.path, tables[0])
    if rows is not None and not rows.empty:
        yield plots.phase_time_per_rank(counted(rows), "time per phase and rank (counted iterations)")
    phases = read_table(info.run.path, tables[1])
    peaks = device_peaks(info)
    precision = info.config["experiment"]["workload"].get("args", {}).get("precision", "")
    if phases is not None and "tflops" in phases and phases["tflops"].notna().any():
        yield plots.rates(phases, "tflops", "TFLOP/s", peaks.get(precision), f"matmul TFLOP/s per phase ({precision})")
    if phases is not None and "busbw_GBps" in phases and phases["busbw_GBps"].notna().any():
        yield plots.rates(phases, "busbw_GBps", "GB/s", peaks.get("nvlink"), "collective bus bandwidth per phase")


def torch_figures(info: RunInfo) -> Iterator[go.Figure]:
    """HTA's views: temporal breakdown, idle time, overlap, launch delay, kernel types, top kernels."""
    run = info.run.path
    temporal = read_table(run, "torch_temporal")
    if temporal is not None and not temporal.empty:
        yield plots.stacked_per_rank(temporal, {"compute_time(us)": "compute", "non_compute_time(us)": "non-compute",
                                                "idle_time(us)": "idle"}, "time (us)", "temporal breakdown per rank")
    idle = read_table(run, "torch_idle")
    if idle is not None and not idle.empty:
        yield plots.bars_per_rank(idle, "idle_time", "idle_category", "idle time (us)", "GPU idle time breakdown")
    overlap = read_table(run, "torch_overlap")
    if overlap is not None and overlap["comp_comm_overlap_pctg"].notna().any():
        yield plots.bars_per_rank(overlap.fillna(0), "comp_comm_overlap_pctg", None, "%",
                                  "communication overlapped by computation per rank")
    launch = read_table(run, "torch_launch")
    if launch is not None and not launch.empty:
        yield plots.histogram(launch["launch_delay"], "launch delay (us)", "kernel launch delay",
                              launch["rank"].astype(str))
    types = read_table(run, "torch_kernel_types")
    if types is not None and not types.empty:
        yield plots.shares(types.groupby("kernel_type", as_index=False)["sum"].sum(), "kernel_type", "sum",
                           "GPU time by kernel type (all ranks)")
    kernels = read_table(run, "torch_kernels")
    if kernels is not None and not kernels.empty:
        top = kernels[kernels["name"] != "others"].assign(time_ms=kernels["sum (us)"] / 1e3)
        top = top.sort_values("time_ms", ascending=False).groupby("rank").head(8)
        yield plots.top_kernels(top, "top kernels per rank")


def nsys_figures(info: RunInfo) -> Iterator[go.Figure]:
    """GPU time by kernel category per rank, NCCL per collective and rank, phases per rank."""
    run = info.run.path
    kern = read_table(run, "nsys_cuda_gpu_kern_sum")
    if kern is not None and not kern.empty:
        df = kern.assign(category=kern["Name"].astype(str).map(kernel_category),
                         time_ms=kern["Total Time (ns)"] / 1e6)
        by = df.groupby(["rank", "category"], as_index=False)["time_ms"].sum()
        yield plots.bars_per_rank(by, "time_ms", "category", "GPU time (ms)", "GPU time by kernel category per rank")
        top = df.sort_values("time_ms", ascending=False).groupby("rank").head(8).rename(columns={"Name": "name"})
        yield plots.top_kernels(top, "top kernels per rank")
    nccl = read_table(run, "nsys_nccl")
    if nccl is not None and not nccl.empty and "scope" in nccl:
        per_rank = nccl[nccl["scope"] != "all"].assign(time_ms=lambda d: d["total_ns"] / 1e6,
                                                       rank=lambda d: d["rank"].astype(int))
        if not per_rank.empty:
            yield plots.bars_per_rank(per_rank, "time_ms", "collective", "NCCL time (ms)",
                                      "NCCL collectives per type and rank")
    phases = read_table(run, "nsys_phases")
    if phases is not None and not phases.empty:
        top = phases.groupby("range")["range_time_ns"].sum().nlargest(10).index
        df = phases[phases["range"].isin(top)]
        df = df.assign(ms=df["range_time_ns"] / df["instances"].clip(lower=1) / 1e6)
        yield plots.grouped(df, "range", "ms", "rank", "mean range time (ms)",
                            "NVTX ranges per rank (mean time, the 10 longest ranges)")
    timeline = read_table(run, "nsys_timeline")
    if timeline is not None and not timeline.empty:
        yield plots.gantt(timeline, "NVTX ranges of one iteration on every rank")
    gaps = read_table(run, "nsys_gaps")
    if gaps is not None and not gaps.empty:
        yield plots.gaps(gaps, "GPU idle gaps over 0.1 ms per rank")
    overlap = read_table(run, "nsys_overlap")
    if overlap is not None and not overlap.empty:
        ms = overlap.assign(**{c: overlap[c] / 1e6 for c in ("compute_ns", "comm_ns", "idle_ns")})
        yield plots.stacked_per_rank(ms,
                                     {"compute_ns": "compute", "comm_ns": "communication", "idle_ns": "idle"},
                                     "ms", "GPU busy and idle time per rank")
    slowdown = read_table(run, "echo_slowdown")
    if slowdown is not None and "slowdown" in slowdown and slowdown["slowdown"].notna().any():
        yield plots.histogram(slowdown["slowdown"].dropna(), "slowdown (distributed / 1 GPU)",
                              "kernel slowdown distribution (Echo)")


def ncu_figures(info: RunInfo) -> Iterator[go.Figure]:
    """Echo's kernel metric table as speed-of-light bars."""
    table = read_table(info.run.path, "ncu_metrics")
    if table is None or table.empty:
        return
    cols = [c for c in table.columns if c.startswith(SOL_COLUMNS) and pd.api.types.is_numeric_dtype(table[c])]
    if cols:
        head = table.head(20)
        head = head.assign(kernel=head["ID"].astype(str) + " " + head["Kernel Name"].astype(str).str.slice(0, 40))
        long = head.melt(id_vars="kernel", value_vars=cols, var_name="metric", value_name="pct")
        yield plots.sol_bars(long, "ncu speed of light (Echo metrics)")


def section(title: str, figures: list[go.Figure], counter: list[int], grid: bool = False) -> str:
    heading = f"<h2>{html.escape(title)}</h2>" if title else ""
    parts = [f"{heading}<div class='{'grid' if grid else 'col'}'>"]
    for fig in figures:
        counter[0] += 1
        parts.append(fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig{counter[0]}",
                                 config={"displaylogo": False}))
    return "\n".join(parts) + "</div>"


def run_header(info: RunInfo) -> str:
    params = "".join(f"{k}={format_value(v)}; " for k, v in info.params.items())
    metrics = "".join(f"<tr><td>{html.escape(n)}</td><td>{html.escape(with_unit(v, u))}</td></tr>"
                      for n, v, u in info.metrics)
    return (f"<p>{html.escape(info.kind)} on {info.config.get('world_size')} rank(s), "
            f"profile {html.escape(info.tool)}; "
            f"{html.escape(params)}state {html.escape(info.state)}</p><table class='m'>{metrics}</table>")


def build_html(infos: list[RunInfo]) -> str:
    """The report as one HTML document."""
    counter = [0]
    body = []
    sweep = list(sweep_figures(infos))
    if sweep:
        body.append(section("Sweep: headline metrics against the swept parameters", sweep, counter, grid=True))
    for info in infos:
        figures = [*workload_figures(info), *torch_figures(info), *nsys_figures(info), *ncu_figures(info)]
        body.append(f"<h2>Run {html.escape(info.run.run_id)}</h2>" + run_header(info))
        body.append(section("", figures, counter))
    title = f"hpcprof report: {infos[0].config['experiment']['name']}" if infos else "hpcprof report"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:2em}table.m td{padding:0 1em}"
            "table.m td:last-child{text-align:right}"
            ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:8px}</style>"
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body><h1>{html.escape(title)}</h1>"
            f"<p data-figures='{counter[0]}'>{counter[0]} figures</p>" + "\n".join(body) + "</body></html>")
