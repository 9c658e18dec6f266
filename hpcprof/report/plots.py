"""Plotly figures of result tables: each function takes DataFrames and only draws. Values that do
not share a scale (one point's iteration 10 times another's) are drawn in facets, each with its
own axis, so that none is flattened on the axis of the largest."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hpcprof.report.terminal import short_name

LAYOUT = {"template": "plotly_white", "height": 380, "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}
#: values whose largest is more than this many times the smallest are drawn on axes of their own
SCALE_RATIO = 5.0
COLORS = px.colors.qualitative.Plotly


def _fig(fig: go.Figure, title: str) -> go.Figure:
    return fig.update_layout(title=title, **LAYOUT)


def spans_scales(values: Iterable[float], ratio: float = SCALE_RATIO) -> bool:
    """Whether the positive values differ by more than `ratio` times (one linear axis would flatten
    the small ones)."""
    positive = [float(v) for v in values if pd.notna(v) and v > 0]
    return len(positive) > 1 and max(positive) > ratio * min(positive)


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
    """A row per rank (and kind: NVTX phase or kernel, where the table says), a bar per range or
    kernel from start_ms to end_ms (df: rank, range, start_ms, end_ms[, kind]); long names
    shortened in the legend (whole in the hover), the legend below the plot so that it never
    takes the plot's width."""
    rows = df.assign(row=[f"rank {r} {k}" if "kind" in df else f"rank {r}"
                          for r, k in zip(df["rank"], df["kind"] if "kind" in df else df["rank"], strict=True)])
    fig = go.Figure()
    for name, g in rows.groupby("range", sort=False):
        fig.add_trace(go.Bar(name=short_name(str(name)), orientation="h", y=g["row"], base=g["start_ms"],
                             x=g["end_ms"] - g["start_ms"], hovertext=str(name), hoverinfo="text+x"))
    entries = rows["range"].nunique()
    legend_rows = (entries + 2) // 3               # about three shortened names per legend row
    fig.update_layout(barmode="overlay", xaxis_title="ms from the iteration's start", bargap=0.3,
                      yaxis={"autorange": "reversed"},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.25, "x": 0})
    fig.update_traces(opacity=0.6)
    plot_height = max(200, 40 * rows["row"].nunique())
    return _fig(fig, title).update_layout(height=plot_height + 150 + 22 * legend_rows,
                                          margin={"l": 110, "r": 20, "t": 50, "b": 80 + 22 * legend_rows})


def gaps(df: pd.DataFrame, starts: dict[int, int], length_ms: float, title: str) -> go.Figure:
    """Idle gaps as points: when (ms from the start of the rank's window, `starts`: rank -> its
    start in ns) against how long (ms), per rank, on the window's length (`length_ms`)."""
    df = df.assign(t_ms=(df["start_ns"] - df["rank"].map(starts).fillna(df["start_ns"].min())) / 1e6,
                   ms=df["duration_ns"] / 1e6, rank=df["rank"].astype(str))
    fig = px.scatter(df, x="t_ms", y="ms", color="rank", hover_data=["before", "after"], render_mode="svg",
                     labels={"t_ms": "ms from the window's start", "ms": "gap (ms)"}, range_x=[0, length_ms],
                     range_y=[0, 1.1 * float(df["ms"].max())])
    return _fig(fig, title)


def sol_bars(df: pd.DataFrame, title: str) -> go.Figure:
    """Speed-of-light % per kernel (df: kernel, metric, pct)."""
    fig = px.bar(df, y="kernel", x="pct", color="metric", barmode="group", orientation="h",
                 range_x=[0, 100], labels={"pct": "% of peak", "kernel": ""})
    return _fig(fig, title)


def facets(points: list[str], title: str, rows: str = "") -> go.Figure:
    """A figure of one facet per point, each with its own value axis: side by side, or one above the
    other where `rows` (the value axes' one title) is given."""
    if rows:
        fig = make_subplots(rows=len(points), cols=1, shared_xaxes=True, subplot_titles=points, y_title=rows,
                            x_title="iteration", vertical_spacing=min(0.12, 0.5 / len(points)))
        return _fig(fig, title).update_layout(height=120 + 220 * len(points))
    return _fig(make_subplots(rows=1, cols=len(points), subplot_titles=points,
                              horizontal_spacing=min(0.08, 0.5 / len(points))), title)


def stacked_by_point(df: pd.DataFrame, part: str, unit: str, title: str) -> go.Figure:
    """One stacked bar per sweep point (df: point, `part`, ms), a colour per part; in facets with
    their own axes where the points' totals do not share a scale."""
    points = list(dict.fromkeys(df["point"]))
    names = list(dict.fromkeys(df[part]))
    if not spans_scales(df.groupby("point")["ms"].sum()):
        fig = go.Figure([go.Bar(name=str(name), x=g["point"], y=g["ms"], marker_color=COLORS[i % len(COLORS)])
                         for i, (name, g) in enumerate((n, df[df[part] == n]) for n in names)])
        fig.update_layout(barmode="stack", xaxis_title="sweep point", yaxis_title=unit, legend_title=part)
        return _fig(fig, title)
    fig = facets(points, title)
    for i, name in enumerate(names):
        for col, point in enumerate(points, start=1):
            g = df[(df[part] == name) & (df["point"] == point)]
            fig.add_trace(go.Bar(name=str(name), x=g["point"], y=g["ms"], legendgroup=str(name), showlegend=col == 1,
                                 marker_color=COLORS[i % len(COLORS)]), row=1, col=col)
    fig.update_layout(barmode="stack", legend_title=part)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(title_text=unit, col=1)
    return fig


def iteration_ci(points: pd.DataFrame, runs: pd.DataFrame, title: str) -> go.Figure:
    """Mean iteration time per point with its 95 % confidence interval (points: point, mean, ci95)
    and each repetition as a dot (runs: point, time_ms, run); in facets with their own axes where the
    points' times do not share a scale."""
    def traces(p: pd.DataFrame, r: pd.DataFrame, legend: bool) -> list[go.BaseTraceType]:
        return [go.Bar(name="mean (95 % CI)", x=p["point"], y=p["mean"], error_y={"type": "data",
                       "array": p["ci95"].fillna(0)}, opacity=0.6, marker_color=COLORS[0], legendgroup="mean",
                       showlegend=legend),
                go.Scatter(name="repetition", x=r["point"], y=r["time_ms"], mode="markers", hovertext=r["run"],
                           marker={"size": 9, "color": "black"}, legendgroup="repetition", showlegend=legend)]

    if not spans_scales(points["mean"]):
        fig = go.Figure(traces(points, runs, True))
        fig.update_layout(xaxis_title="sweep point", yaxis_title="iteration time (ms)")
        return _fig(fig, title)
    labels = list(points["point"])
    fig = facets(labels, title)
    for col, point in enumerate(labels, start=1):
        for trace in traces(points[points["point"] == point], runs[runs["point"] == point], col == 1):
            fig.add_trace(trace, row=1, col=col)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(title_text="iteration time (ms)", col=1)
    return fig


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
    """`value` against the iteration, a line per run labelled `<point> #<repetition>` (df: point,
    repetition, iteration, `value`); a facet per point, each with its own axis, where the points'
    values do not share a scale."""
    points = list(dict.fromkeys(df["point"]))
    split = len(points) > 1 and spans_scales(df.groupby("point")[value].median())
    fig = facets(points, title, rows=unit) if split else go.Figure()
    for (point, rep), g in df.groupby(["point", "repetition"], sort=False):
        trace = go.Scatter(name=f"{point} #{int(rep)}", x=g["iteration"], y=g[value], mode="lines+markers",
                           marker={"size": 4})
        if split:
            fig.add_trace(trace, row=points.index(point) + 1, col=1)
        else:
            fig.add_trace(trace)
    if split:
        return fig
    fig.update_layout(xaxis_title="iteration", yaxis_title=unit)
    return _fig(fig, title)
