"""The HTML report: one self-contained file (plotly's JS inline, no CDN) that explains a sweep (or
one run): findings in words first, then where the time goes per sweep point, repetitions and
verdicts, scaling, % of hardware peak, stragglers and jitter per iteration, the critical path, and
the runs in an appendix. At most MAX_FIGURES figures: each answers one question; the appendix
draws the first repetition of each point within what is left."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from hpcprof import catalog as c
from hpcprof import profilers
from hpcprof.analysis.categories import categories_for
from hpcprof.analysis.forensics.verdict import stack_lines
from hpcprof.analysis.summary import counted
from hpcprof.lazy import load_target
from hpcprof.report import findings as words
from hpcprof.report import plots, sweep
from hpcprof.report.runs import RunInfo
from hpcprof.report.terminal import format_value, with_unit
from hpcprof.results import read_table
from hpcprof.safe_text import plotly_escaped

MAX_FIGURES = 24
#: ncu's Echo columns drawn as speed-of-light bars (by name prefix)
SOL_COLUMNS = ("Compute throughput", "Memory throughput", "DRAM throughput", "Achieved occupancy")
STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1500px}table{border-collapse:collapse;margin:.5em 0}"
         "td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}td.n{text-align:right}"
         "#findings li{margin:.3em 0}.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));"
         "gap:8px}details{margin:1em 0}summary{font-weight:bold;cursor:pointer}")


def table_html(df: pd.DataFrame) -> str:
    """A small HTML table; numbers formatted as the terminal report does."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(
        f"<td class='n'>{html.escape(format_value(v))}</td>" if isinstance(v, (int, float)) and not isinstance(v, bool)
        else f"<td>{html.escape(format_value(v))}</td>" for v in row) + "</tr>" for row in df.itertuples(index=False))
    return f"<table><tr>{head}</tr>{body}</table>"


class Page:
    """The document being built: sections of HTML and figures, numbered fig1, fig2, ..."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.figures = 0

    def add(self, text: str) -> None:
        self.parts.append(text)

    def figure(self, fig: go.Figure) -> None:
        """Add a figure, its texts escaped (safe_text.plotly_escaped: a kernel name's <a href> shows as text)."""
        self.figures += 1
        self.parts.append(plotly_escaped(fig).to_html(full_html=False, include_plotlyjs=False, div_id=f"fig{self.figures}",
                                      config={"displaylogo": False}))

    def section(self, ident: str, title: str, intro: str, figures: list[go.Figure], extra: str = "") -> None:
        self.add(f"<section id='{ident}'><h2>{html.escape(title)}</h2><p>{html.escape(intro)}</p><div class='grid'>")
        for fig in figures:
            self.figure(fig)
        self.add(f"</div>{extra}</section>")


def repetitions_table(points: list[sweep.Point]) -> pd.DataFrame:
    rows = []
    for p in points:
        row = p.row
        rows.append({"point": p.label, "runs": len(p.infos), "iteration (ms)": p.metric(c.ITERATION_MEAN),
                     "95 % CI ± (ms)": row.get(f"{c.ITERATION_MEAN.column} ci95"),
                     "change (%)": row.get("change_pct"), "verdict": row.get("verdict"), "test": row.get("test"),
                     "p": words.p_text(row["p_value"]) if pd.notna(row.get("p_value")) else ""})
    return pd.DataFrame(rows)


def main_sections(page: Page, points: list[sweep.Point]) -> list[str]:
    """Draw the sweep's sections into `page`; returns the findings' sentences."""
    found: list[str] = []
    phases, gpu = sweep.phase_breakdown(points), sweep.gpu_breakdown(points)
    window = sweep.window_note(points)
    found += words.where_time_goes(points, phases, gpu, window)
    figures = []
    if not phases.empty:
        figures.append(plots.stacked_by_point(phases, "phase", "mean time (ms)",
                                              "Where does an iteration's time go? (workload phases, counted iterations)"))
    if not gpu.empty:
        figures.append(plots.stacked_by_point(gpu, "category", "GPU time per rank (ms)",
                                              f"Which kernels take the GPU time? ({window})"))
    page.section("breakdown", "Where the time goes", "One stacked bar per sweep point.", figures)

    found += words.changes(points)
    found += words.noise(points)
    reps = sweep.repetitions(points)
    summary = pd.DataFrame({"point": [p.label for p in points], "mean": [p.metric(c.ITERATION_MEAN) for p in points],
                            "ci95": [p.row.get(f"{c.ITERATION_MEAN.column} ci95") for p in points]})
    figures = [plots.iteration_ci(summary, reps, "How long is an iteration, and how much do repetitions vary?")] \
        if summary["mean"].notna().any() else []
    tests = sorted({str(t) for t in (p.row.get("test") for p in points) if t and t != "the baseline"})
    page.section("repetitions", "Repetitions and verdicts",
                 "Bars: mean over repetitions with the 95 % confidence interval (Student t, n - 1 degrees of "
                 "freedom); dots: each repetition. Verdicts against the baseline at the 5 % level: "
                 + ("; ".join(tests) or "none") + ".", figures, table_html(repetitions_table(points)))

    scale = sweep.scaling(points)
    if not scale.empty:
        found += words.scaling_sentences(scale)
        page.section("scaling", "Scaling", "Speed-up and parallel efficiency against the smallest world size of "
                     "each group of points; dashed: ideal.",
                     [plots.against_ranks(scale, "speedup", "ideal", "speed-up", "How much faster with more ranks?"),
                      plots.against_ranks(scale, "efficiency_pct", 100.0, "parallel efficiency (%)",
                                          "How efficiently are the added ranks used?")])

    peaks = sweep.peak_shares(points)
    if not peaks.empty:
        found += words.peak_sentences(peaks)
        sources = peaks.drop_duplicates("reference")[["reference", "peak", "unit", "source"]]
        figures = [plots.peak_pct(peaks, "How close to the hardware's peak? (matmul TFLOP/s, bus bandwidth)")] \
            if peaks["pct"].notna().any() else []
        page.section("peaks", "% of hardware peak", "Matmul TFLOP/s against the GPU's dense peak for the precision; "
                     "bus bandwidth against NVLink (one node) or the network (several nodes), per direction. "
                     "Where each peak comes from:", figures, table_html(sources))
    return found + iteration_sections(page, points)


def iteration_sections(page: Page, points: list[sweep.Point]) -> list[str]:
    """Per-iteration sections: stragglers, jitter and GPU idle per iteration, the critical path."""
    found: list[str] = []
    strag, series = sweep.stragglers(points), sweep.per_iteration(points)
    idle = sweep.gpu_idle_per_iteration(points)
    found += words.slowest_rank(points, strag)
    found += words.idle_sentence(idle)
    figures = []
    if not strag.empty:
        figures.append(plots.per_iteration_lines(strag, "excess_ms", "slowest rank's excess over the median (ms)",
                                                 "Which iterations have a straggler, and how much does it cost?"))
    if not series.empty:
        figures.append(plots.per_iteration_lines(series, "time_ms", "iteration time, mean over ranks (ms)",
                                                 "Does the iteration time settle? (warm-up and jitter)"))
    if not idle.empty:
        figures.append(plots.per_iteration_lines(idle.assign(repetition=idle.groupby("point")["run"].rank("dense")),
                                                 c.ITERATION_IDLE_PCT.name, "GPU idle (%)",
                                                 "How idle is the GPU in each iteration?"))
    extra = ""
    if not strag.empty:
        table = strag.groupby(["point", "slowest_rank"], sort=False).agg(
            iterations=("iteration", "size"), median_excess_ms=("excess_ms", "median"),
            max_excess_ms=("excess_ms", "max")).reset_index()
        extra = "<p>Slowest rank per iteration, counted over the iterations of each point:</p>" + table_html(table)
    if figures:
        page.section("iterations", "Per iteration: stragglers and jitter",
                     "From each iteration's time on every rank (counted iterations for stragglers).", figures, extra)
    critical = sweep.critical_path(points)
    if not critical.empty:
        found += words.critical_sentence(critical)
        held = critical.assign(held_ms=critical["held_ns"] / 1e6)
        by_rank = held.groupby(["point", "critical_rank"], as_index=False)["held_ms"].sum()
        top = held.nlargest(10, "held_ms")[["point", "iteration", "collective", "critical_rank", "held_by", "held_ms"]]
        page.section("critical-path", "Critical path across ranks", "Which rank's work the others waited for, and "
                     "in which collective.",
                     [plots.grouped(by_rank, "critical_rank", "held_ms", "point", "time others waited (ms)",
                                    "Which rank holds the others up?")], table_html(top))
    return found


def workload_figures(info: RunInfo) -> Iterator[go.Figure]:
    """seqpar / ddp: per-phase time per rank."""
    timing = c.WORKLOAD_TIMINGS.get(info.kind)
    rows = read_table(info.run.path, timing[1].name) if timing else None
    if rows is not None and not rows.empty:
        yield plots.phase_time_per_rank(counted(rows), "time per phase and rank (counted iterations)")


def torch_figures(info: RunInfo) -> Iterator[go.Figure]:
    """HTA's views: temporal breakdown, idle time, overlap, launch delay, kernel types."""
    run = info.run.path
    temporal = read_table(run, c.TORCH_TEMPORAL.name)
    if temporal is not None and not temporal.empty:
        yield plots.stacked_per_rank(temporal, {"compute_time(us)": "compute", "non_compute_time(us)": "non-compute",
                                                "idle_time(us)": "idle"}, "time (us)", "temporal breakdown per rank")
    idle = read_table(run, c.TORCH_IDLE.name)
    if idle is not None and not idle.empty:
        yield plots.bars_per_rank(idle, "idle_time", "idle_category", "idle time (us)", "GPU idle time breakdown")
    overlap = read_table(run, c.TORCH_OVERLAP.name)
    if overlap is not None and overlap["comp_comm_overlap_pctg"].notna().any():
        yield plots.bars_per_rank(overlap.fillna(0), "comp_comm_overlap_pctg", None, "%",
                                  "communication overlapped by computation per rank")
    launch = read_table(run, c.TORCH_LAUNCH.name)
    if launch is not None and not launch.empty:
        yield plots.histogram(launch["launch_delay"], "launch delay (us)", "kernel launch delay",
                              launch["rank"].astype(str))
    types = read_table(run, c.TORCH_KERNEL_TYPES.name)
    if types is not None and not types.empty:
        yield plots.shares(types.groupby("kernel_type", as_index=False)["sum"].sum(), "kernel_type", "sum",
                           "GPU time by kernel type (all ranks)")


def nsys_figures(info: RunInfo) -> Iterator[go.Figure]:
    """Echo's slowdown, GPU time by category and NCCL per rank, the timeline, busy/idle, gaps."""
    run = info.run.path
    slowdown = read_table(run, c.ECHO_SLOWDOWN.name)
    if slowdown is not None and "slowdown" in slowdown and slowdown["slowdown"].notna().any():
        yield plots.histogram(slowdown["slowdown"].dropna(), "slowdown (distributed / 1 GPU)",
                              "kernel slowdown distribution (Echo)")
    kern = read_table(run, c.NSYS_CUDA_GPU_KERN_SUM.name)
    if kern is not None and not kern.empty:
        df = kern.assign(category=kern["Name"].astype(str).map(categories_for(info.record)),
                         time_ms=kern["Total Time (ns)"] / 1e6)
        by = df.groupby(["rank", "category"], as_index=False)["time_ms"].sum()
        yield plots.bars_per_rank(by, "time_ms", "category", "GPU time (ms)", "GPU time by kernel category per rank")
    nccl = read_table(run, c.NSYS_NCCL.name)
    if nccl is not None and not nccl.empty and "scope" in nccl:
        per_rank = nccl[nccl["scope"] != "all"].assign(time_ms=lambda d: d["total_ns"] / 1e6,
                                                       rank=lambda d: d["rank"].astype(int))
        if not per_rank.empty:
            yield plots.bars_per_rank(per_rank, "time_ms", "collective", "NCCL time (ms)",
                                      "NCCL collectives per type and rank")
    timeline = read_table(run, c.NSYS_TIMELINE.name)
    if timeline is not None and not timeline.empty:
        yield plots.gantt(timeline, "one iteration on every rank")
    overlap = read_table(run, c.NSYS_OVERLAP.name)
    if overlap is not None and not overlap.empty:
        ms = overlap.assign(**{c: overlap[c] / 1e6 for c in ("compute_ns", "comm_ns", "idle_ns")})
        yield plots.stacked_per_rank(ms, {"compute_ns": "compute", "comm_ns": "communication", "idle_ns": "idle"},
                                     "ms", "GPU busy and idle time per rank")
    gaps = read_table(run, c.NSYS_GAPS.name)
    if gaps is not None and not gaps.empty:
        yield plots.gaps(gaps, "GPU idle gaps over 0.1 ms per rank")


def ncu_figures(info: RunInfo) -> Iterator[go.Figure]:
    """Echo's kernel metric table as speed-of-light bars."""
    table = read_table(info.run.path, c.NCU_METRICS.name)
    if table is None or table.empty:
        return
    cols = [c for c in table.columns if c.startswith(SOL_COLUMNS) and pd.api.types.is_numeric_dtype(table[c])]
    if cols:
        head = table.head(20)
        head = head.assign(kernel=head["ID"].astype(str) + " " + head["Kernel Name"].astype(str).str.slice(0, 40))
        long = head.melt(id_vars="kernel", value_vars=cols, var_name="metric", value_name="pct")
        yield plots.sol_bars(long, "ncu speed of light (Echo metrics)")


def run_figures(info: RunInfo) -> Iterator[go.Figure]:
    """A run's figures, most telling first: its profile tool's (profilers.Profiler.figures), then the workload's."""
    profiler = profilers.find(info.tool)
    if profiler is not None and profiler.figures:
        make: Callable[[RunInfo], Iterator[go.Figure]] = load_target(profiler.figures)
        yield from make(info)
    yield from workload_figures(info)


def run_header(info: RunInfo) -> str:
    params = "".join(f"{k}={format_value(v)}; " for k, v in info.params.items())
    metrics = pd.DataFrame([(n, with_unit(v, u)) for n, v, u in info.metrics], columns=["metric", "value"])
    text = (f"<p>{html.escape(info.kind)} on {info.record.world_size} rank(s), profile "
            f"{html.escape(info.tool)}; {html.escape(params)}state {html.escape(info.state)}"
            f"{' (' + html.escape(info.reason) + ')' if info.reason else ''}; {html.escape(str(info.run.path))}</p>")
    if stack := stack_lines(info.run, info.state):  # the stack of the rank the reason names
        text += f"<pre class='stack'>{html.escape(chr(10).join(stack))}</pre>"
    if info.overhead is not None:    # the profiler's perturbation of each step
        text += (f"<p class='{'warning' if info.overhead.warning else 'note'}'>"
                 f"{html.escape(info.overhead.sentence())}</p>")
    if not metrics.empty:
        text += table_html(metrics)
    if info.top:
        text += "<p>Top kernels (all ranks):</p>" + table_html(pd.DataFrame(info.top, columns=["name", "time_ms", "category"]))
    return text


def appendix(page: Page, infos: list[RunInfo], points: list[sweep.Point]) -> None:
    """Every run's header and metrics; figures for the first repetition of each point while the
    figure budget lasts, shared evenly."""
    drawn = {p.first.run.run_id for p in points}
    budget = max(0, MAX_FIGURES - page.figures)
    per_run = budget // max(1, len(drawn))
    page.add("<section id='appendix'><h2>Appendix: runs</h2><p>Each run's metrics; figures per rank for the "
             f"first repetition of each sweep point (at most {per_run} per run, {MAX_FIGURES} figures in the report)."
             "</p>")
    for info in infos:
        page.add(f"<details open><summary>Run {html.escape(info.run.run_id)}</summary>{run_header(info)}"
                 "<div class='grid'>")
        if info.run.run_id in drawn:
            figures = list(run_figures(info))
            for fig in figures[:per_run]:
                page.figure(fig)
        page.add("</div></details>")
    page.add("</section>")


def build_html(infos: list[RunInfo], baseline: str | None = None) -> str:
    """The report as one HTML document (verdicts against run `baseline`, default: the first run)."""
    page = Page()
    points = sweep.sweep_points(infos, baseline)
    found = main_sections(page, points) if points else []
    body = "".join(page.parts)
    page.parts = []
    appendix(page, infos, points)
    title = f"hpcprof report: {infos[0].record.experiment.name}" if infos else "hpcprof report"
    state = ", ".join(f"{n} {s}" for s, n in pd.Series([i.state for i in infos]).value_counts().items())
    items = "".join(f"<li>{html.escape(s)}</li>" for s in found) or "<li>No collected run to explain.</li>"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            f"<h1>{html.escape(title)}</h1><p data-figures='{page.figures}'>{len(infos)} runs ({html.escape(state)}), "
            f"{len(points)} sweep point(s), {page.figures} figures.</p>"
            f"<section id='findings'><h2>Findings</h2><ul>{items}</ul></section>"
            + body + "".join(page.parts) + "</body></html>")
