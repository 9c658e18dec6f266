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




def stacked_per_rank(df: pd.DataFrame, parts: dict[str, str], unit: str, title: str) -> go.Figure:
    """Stacked bars per rank of the columns in `parts` (column -> label)."""
    fig = go.Figure([go.Bar(name=label, x=df["rank"].astype(str), y=df[col]) for col, label in parts.items()])
    fig.update_layout(barmode="stack", xaxis_title="rank", yaxis_title=unit)
    return _fig(fig, title)


def bars_per_rank(df: pd.DataFrame, value: str, color: str | None, unit: str, title: str) -> go.Figure:
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




def stacked_by_point(df: pd.DataFrame, part: str, unit: str, title: str) -> go.Figure:
    """One stacked bar per sweep point (df: point, `part`, ms), a colour per part."""
    fig = go.Figure([go.Bar(name=str(name), x=g["point"], y=g["ms"]) for name, g in df.groupby(part, sort=False)])
    fig.update_layout(barmode="stack", xaxis_title="sweep point", yaxis_title=unit, legend_title=part)
    return _fig(fig, title)


def iteration_ci(points: pd.DataFrame, runs: pd.DataFrame, title: str) -> go.Figure:
    """Mean iteration time per point with its 95 % confidence interval (points: point, mean, ci95)
    and each repetition as a dot (runs: point, time_ms, run)."""
    error = {"type": "data", "array": points["ci95"].fillna(0)}
    fig = go.Figure([go.Bar(name="mean (95 % CI)", x=points["point"], y=points["mean"], error_y=error, opacity=0.6),
                     go.Scatter(name="repetition", x=runs["point"], y=runs["time_ms"], mode="markers",
                                hovertext=runs["run"], marker={"size": 9, "color": "black"})])
    fig.update_layout(xaxis_title="sweep point", yaxis_title="iteration time (ms)")
    return _fig(fig, title)


def against_ranks(df: pd.DataFrame, value: str, ideal: str | float, unit: str, title: str) -> go.Figure:
    """`value` against the world size, a line per group, and the ideal as a dashed line
    (`ideal`: a column of df or a constant)."""
    fig = go.Figure()
    for name, g in df.groupby("group", sort=False):
        g = g.sort_values("world_size")
        fig.add_trace(go.Scatter(name=str(name), x=g["world_size"], y=g[value], mode="markers+lines",
                                 hovertext=g["point"]))
    sizes = sorted(df["world_size"].unique())
    ideal_y = [ideal] * len(sizes) if not isinstance(ideal, str) else \
        [float(df.loc[df["world_size"] == n, ideal].iloc[0]) for n in sizes]
    fig.add_trace(go.Scatter(name="ideal", x=sizes, y=ideal_y, mode="lines", line={"dash": "dash", "color": "gray"}))
    fig.update_layout(xaxis_title="ranks (world size)", yaxis_title=unit,
                      xaxis={"tickmode": "array", "tickvals": sizes})
    return _fig(fig, title)


def peak_pct(df: pd.DataFrame, title: str) -> go.Figure:
    """% of the hardware's peak per point, a bar per phase (df: point, phase, what, pct, value, unit)."""
    df = df[df["pct"].notna()].assign(series=lambda d: d["phase"] + " (" + d["unit"] + ")")
    fig = px.bar(df, x="point", y="pct", color="series", barmode="group", hover_data=["value", "unit", "reference"],
                 labels={"pct": "% of peak", "point": "sweep point", "series": ""})
    fig.add_hline(y=100, line_dash="dash", line_color="gray")
    return _fig(fig, title)


def per_iteration_lines(df: pd.DataFrame, value: str, unit: str, title: str) -> go.Figure:
    """`value` against the iteration, a line per run (df: point, repetition, iteration, `value`)."""
    fig = go.Figure()
    for (point, rep), g in df.groupby(["point", "repetition"], sort=False):
        fig.add_trace(go.Scatter(name=f"{point} #{rep}", x=g["iteration"], y=g[value], mode="lines+markers",
                                 marker={"size": 4}))
    fig.update_layout(xaxis_title="iteration", yaxis_title=unit)
    return _fig(fig, title)
