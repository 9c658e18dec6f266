"""Plotly figures of result tables: each function takes DataFrames and only draws."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

LAYOUT = {"template": "plotly_white", "height": 380, "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}


def _fig(fig: go.Figure, title: str) -> go.Figure:
    return fig.update_layout(title=title, **LAYOUT)


def phase_time_per_rank(rows: pd.DataFrame, title: str) -> go.Figure:
    """Mean time of each phase per rank (rows: rank, phase, time_ms)."""
    mean = rows.groupby(["rank", "phase"], sort=False)["time_ms"].mean().reset_index()
    fig = px.bar(mean, x="phase", y="time_ms", color=mean["rank"].astype(str), barmode="group",
                 labels={"time_ms": "mean time (ms)", "color": "rank"})
    return _fig(fig, title)


def rates(phases: pd.DataFrame, column: str, unit: str, peak: float | None, title: str) -> go.Figure:
    """A rate per phase (TFLOP/s or GB/s), with the device's peak as a line when known."""
    df = phases[phases[column].notna()]
    fig = px.bar(df, x="phase", y=column, labels={column: unit})
    if peak:
        fig.add_hline(y=peak, line_dash="dash", annotation_text=f"peak {peak:,.0f} {unit}")
    return _fig(fig, title)


def stacked_per_rank(df: pd.DataFrame, parts: dict[str, str], unit: str, title: str) -> go.Figure:
    """Stacked bars per rank of the columns in `parts` (column -> label)."""
    fig = go.Figure([go.Bar(name=label, x=df["rank"].astype(str), y=df[col]) for col, label in parts.items()])
    fig.update_layout(barmode="stack", xaxis_title="rank", yaxis_title=unit)
    return _fig(fig, title)


def bars_per_rank(df: pd.DataFrame, value: str, color: str, unit: str, title: str) -> go.Figure:
    """Grouped bars: `value` per rank, one colour per `color` category."""
    fig = px.bar(df, x=df["rank"].astype(str), y=value, color=color, barmode="stack",
                 labels={"x": "rank", value: unit})
    return _fig(fig, title)


def grouped(df: pd.DataFrame, x: str, y: str, group: str, unit: str, title: str) -> go.Figure:
    """Grouped bars of `y` per `x`, one bar per `group` value (e.g. rank)."""
    fig = px.bar(df, x=x, y=y, color=df[group].astype(str), barmode="group", labels={y: unit, "color": group})
    return _fig(fig, title)


def histogram(values: pd.Series, unit: str, title: str, color: pd.Series | None = None) -> go.Figure:
    fig = px.histogram(x=values, color=color, nbins=50, labels={"x": unit, "color": ""})
    return _fig(fig, title)


def shares(df: pd.DataFrame, names: str, values: str, title: str) -> go.Figure:
    return _fig(px.pie(df, names=names, values=values), title)


def top_kernels(df: pd.DataFrame, title: str) -> go.Figure:
    """Horizontal bars of kernel time (df: name, time_ms, rank), short names on the axis."""
    df = df.assign(short=df["name"].astype(str).str.slice(0, 50), rank=df["rank"].astype(str))
    fig = px.bar(df, y="short", x="time_ms", color="rank", barmode="group", orientation="h",
                 hover_data=["name"], labels={"time_ms": "GPU time (ms)", "short": ""})
    return _fig(fig, title).update_layout(height=max(380, 28 * df["short"].nunique()))


def gantt(df: pd.DataFrame, title: str) -> go.Figure:
    """One row per rank, a bar per NVTX range from start_ms to end_ms (df: rank, range, start_ms, end_ms)."""
    fig = go.Figure()
    for name, g in df.groupby("range", sort=False):
        fig.add_trace(go.Bar(name=str(name), orientation="h", y=[f"rank {r}" for r in g["rank"]],
                             base=g["start_ms"], x=g["end_ms"] - g["start_ms"], hovertext=str(name)))
    fig.update_layout(barmode="overlay", xaxis_title="ms from the iteration's start", bargap=0.3)
    fig.update_traces(opacity=0.6)
    return _fig(fig, title).update_layout(height=max(300, 60 * df["rank"].nunique() + 150))


def gaps(df: pd.DataFrame, title: str) -> go.Figure:
    """Idle gaps as points: when (s from the rank's first gap) against how long (ms), per rank."""
    df = df.assign(t_s=(df["start_ns"] - df.groupby("rank")["start_ns"].transform("min")) / 1e9,
                   ms=df["duration_ns"] / 1e6, rank=df["rank"].astype(str))
    fig = px.scatter(df, x="t_s", y="ms", color="rank", hover_data=["before", "after"], render_mode="svg",
                     labels={"t_s": "s from the first gap", "ms": "gap (ms)"})
    return _fig(fig, title)


def sol_bars(df: pd.DataFrame, title: str) -> go.Figure:
    """Speed-of-light % per kernel (df: kernel, metric, pct)."""
    fig = px.bar(df, y="kernel", x="pct", color="metric", barmode="group", orientation="h",
                 range_x=[0, 100], labels={"pct": "% of peak", "kernel": ""})
    return _fig(fig, title)


def metric_vs_param(df: pd.DataFrame, param: str, metric: str, sd: str | None, title: str) -> go.Figure:
    """A headline metric against a swept parameter (error bars: sd over repetitions)."""
    error = {"type": "data", "array": df[sd]} if sd else None
    if pd.api.types.is_numeric_dtype(df[param]):
        df = df.sort_values(param)
        fig = go.Figure(go.Scatter(x=df[param], y=df[metric], mode="markers+lines", error_y=error))
    else:
        fig = go.Figure(go.Bar(x=df[param].astype(str), y=df[metric], error_y=error))
    fig.update_layout(xaxis_title=param, yaxis_title=metric)
    return _fig(fig, title).update_layout(height=300, title_font_size=13)
