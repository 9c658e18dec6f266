"""Plotly figures of the Python API's trace analyses (`hpcprof.api`, `plot=True`), in the
report's style (hpcprof.report.plots' layout); each function takes the analysis' DataFrame and
only draws, as HTA's `visualize=True` charts do."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

LAYOUT = {"template": "plotly_white", "height": 380, "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}


def _fig(fig: go.Figure, title: str) -> go.Figure:
    return fig.update_layout(title=title, **LAYOUT)


def temporal_breakdown(df: pd.DataFrame) -> go.Figure:
    """Idle, compute and non-compute share of the GPU time per rank, stacked (HTA's chart)."""
    parts = {"idle_time_pctg": "idle", "compute_time_pctg": "compute", "non_compute_time_pctg": "non-compute"}
    fig = go.Figure([go.Bar(name=label, x=df["rank"].astype(str), y=df[col]) for col, label in parts.items()])
    fig.update_layout(barmode="stack", xaxis_title="rank", yaxis_title="% of the GPU time")
    return _fig(fig, "Temporal breakdown")


def idle_time_breakdown(df: pd.DataFrame) -> go.Figure:
    """GPU idle time per rank and stream, split by cause (host wait, kernel wait, other)."""
    where = df["rank"].astype(str) + " / " + df["stream"].astype(str)
    fig = px.bar(df, x=where, y="idle_time", color="idle_category", barmode="stack",
                 labels={"x": "rank / stream", "idle_time": "idle time (us)", "idle_category": ""})
    return _fig(fig, "Idle time breakdown")


def comm_comp_overlap(df: pd.DataFrame) -> go.Figure:
    """Share of the communication time that overlaps computation, per rank."""
    fig = px.bar(df, x=df["rank"].astype(str), y="comp_comm_overlap_pctg",
                 labels={"x": "rank", "comp_comm_overlap_pctg": "overlap (% of comm time)"})
    return _fig(fig, "Communication computation overlap")


def kernel_launch_stats(df: pd.DataFrame) -> go.Figure:
    """Launch delay of every kernel (histogram per rank), HTA's launch-delay view."""
    fig = px.histogram(df, x="launch_delay", color=df["rank"].astype(str), nbins=50, barmode="overlay",
                       labels={"launch_delay": "launch delay (us)", "color": "rank"})
    return _fig(fig, "Kernel launch delay")


def kernel_type_breakdown(df: pd.DataFrame) -> go.Figure:
    """Share of GPU time by kernel type (and overlaps of types), HTA's pie chart."""
    return _fig(px.pie(df, names="kernel_type", values="sum"), "GPU kernel time by type")


def kernel_breakdown(df: pd.DataFrame) -> go.Figure:
    """Time of the longest kernels of each type, one bar per kernel and rank."""
    fig = px.bar(df, x="name", y="sum (us)", color=df["rank"].astype(str), facet_col="kernel_type",
                 barmode="group", labels={"color": "rank"})
    fig.update_xaxes(matches=None, showticklabels=False)
    return _fig(fig, "Top kernels by type")


def metric_by_run(df: pd.DataFrame, metric: str) -> go.Figure:
    """One headline metric per compared run (compare's frame: a `run` column and the metric)."""
    fig = px.bar(df, x="run", y=metric, labels={"run": "run"})
    return _fig(fig, metric)
