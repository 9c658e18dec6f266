"""The HTML report: one self-contained file (plotly's JS inline, no CDN) that explains a sweep (or
one run): findings in words first, then where the time goes per sweep point, repetitions and
verdicts, scaling, % of hardware peak, stragglers and jitter per iteration, the critical path, and
the runs in an appendix. At most MAX_FIGURES figures: each answers one question; the appendix
draws the first repetition of each point within what is left."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from hpcprof import profilers
from hpcprof.analysis.forensics.verdict import stack_lines
from hpcprof.analysis.summary import counted
from hpcprof.core import catalog as c
from hpcprof.core.lazy import load_target
from hpcprof.core.safe_text import plotly_escaped
from hpcprof.report import findings as words
from hpcprof.report import limits, plots, sweep
from hpcprof.report.ceilings import points_attainable
from hpcprof.report.compare import measured_window
from hpcprof.report.overhead import unmeasured
from hpcprof.report.runs import RunInfo
from hpcprof.report.scaling import shown as scaling_table
from hpcprof.report.stats import p_text
from hpcprof.report.terminal import busbw_summary, format_value, top_kernels_window, with_unit
from hpcprof.run.results import read_table

MAX_FIGURES = 24
#: a table's text cell longer than this may break anywhere (a kernel's name, a path): the table keeps the page's width
LONG_CELL = 40
STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:.5em 0}"
         "caption{text-align:left;font-style:italic;padding:2px 0}"
         "td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}td.n{text-align:right}"
         "td.w{overflow-wrap:anywhere;min-width:16em}div.t{overflow-x:auto}"
         "#findings li{margin:.3em 0}figure{margin:1.2em 0;width:100%}figcaption{font-weight:bold;margin:.3em 0}"
         "details{margin:1em 0}summary{font-weight:bold;cursor:pointer}")


def titled(question: str, window: str) -> str:
    """A figure's or table's title that says its window: `question (window)`."""
    return f"{question} ({window})"


def table_html(df: pd.DataFrame, caption: str = "") -> str:
    """A small HTML table with its caption (what it is, over which window); numbers formatted as
    the terminal report does; a table wider than the page scrolls in its own box."""
    def cell(v: object) -> str:
        text = html.escape(format_value(v))
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return f"<td class='n'>{text}</td>"
        return f"<td class='w'>{text}</td>" if len(text) > LONG_CELL else f"<td>{text}</td>"

    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in df.itertuples(index=False))
    title = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<div class='t'><table>{title}<tr>{head}</tr>{body}</table></div>"


class Page:
    """The document being built: sections of HTML and figures, numbered fig1, fig2, ..."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.figures = 0

    def add(self, text: str) -> None:
        self.parts.append(text)

    def figure(self, fig: go.Figure) -> None:
        """The figure the page's width (plotly resizes it with the page), its texts escaped
        (safe_text.plotly_escaped: a kernel name's <a href> shows as text), its title above it as the
        figure's caption, where plotly's toolbar cannot cover it."""
        self.figures += 1
        fig = plotly_escaped(fig)
        title = fig.layout.title.text or ""
        fig.update_layout(title_text=None, autosize=True, width=None)
        div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig{self.figures}", default_width="100%",
                          default_height=f"{fig.layout.height or 380}px",
                          config={"displaylogo": False, "responsive": True})
        self.parts.append(f"<figure><figcaption>{html.escape(title)}</figcaption>{div}</figure>")

    def section(self, ident: str, title: str, intro: str, figures: list[go.Figure], extra: str = "") -> None:
        self.add(f"<section id='{ident}'><h2>{html.escape(title)}</h2><p>{html.escape(intro)}</p>")
        for fig in figures:
            self.figure(fig)
        self.add(f"{extra}</section>")


def repetitions_table(points: list[sweep.Point]) -> pd.DataFrame:
    rows = []
    for p in points:
        row = p.row
        rows.append({"point": p.label, "runs": len(p.infos), "iteration (ms)": p.metric(c.ITERATION_MEAN),
                     "95 % CI ± (ms)": row.get(f"{c.ITERATION_MEAN.column} ci95"),
                     "change (%)": row.get("change_pct"), "verdict": row.get("verdict"), "test": row.get("test"),
                     "p": p_text(row["p_value"]) if pd.notna(row.get("p_value")) else ""})
    return pd.DataFrame(rows)


def main_sections(page: Page, points: list[sweep.Point]) -> list[str]:
    """Draw the sweep's sections into `page`; returns the findings' sentences."""
    found: list[str] = []
    phases, gpu = sweep.phase_breakdown(points), sweep.gpu_breakdown(points)
    window = sweep.window_note(points)
    found += words.where_time_goes(points, phases, gpu)
    figures = []
    if not phases.empty:
        figures.append(plots.stacked_by_point(phases, "phase", "mean time (ms)", titled(
            "Where does an iteration's time go? Workload phases", c.COUNTED)))
    if not gpu.empty:
        figures.append(plots.stacked_by_point(gpu, "category", "GPU time per rank (ms)",
                                              titled("Which kernels take the GPU time?", window)))
    page.section("breakdown", "Where the time goes", "One stacked bar per sweep point (points whose totals differ "
                 f"more than {plots.SCALE_RATIO:g} times: one facet each, with its own axis).", figures)

    found += words.changes(points)
    found += words.noise(points)
    reps = sweep.repetitions(points)
    summary = pd.DataFrame({"point": [p.label for p in points], "mean": [p.metric(c.ITERATION_MEAN) for p in points],
                            "ci95": [p.row.get(f"{c.ITERATION_MEAN.column} ci95") for p in points]})
    figures = [plots.iteration_ci(summary, reps, titled("How long is an iteration, and how much do repetitions vary?",
                                                        c.COUNTED))] if summary["mean"].notna().any() else []
    tests = sorted({str(t) for t in (p.row.get("test") for p in points) if t and t != "the baseline"})
    page.section("repetitions", "Repetitions and verdicts",
                 "Bars: mean over repetitions with the 95 % confidence interval (Student t, n - 1 degrees of "
                 "freedom); dots: each repetition. Verdicts against the baseline at the 5 % level: "
                 + ("; ".join(tests) or "none") + ".", figures,
                 table_html(repetitions_table(points), titled("Iteration time per point and verdict", c.COUNTED)))

    scale = sweep.scaling(points)
    if not scale.empty:
        found += words.scaling_sentences(scale)
        page.section("scaling", "Scaling", "Speed-up and parallel efficiency against the smallest world size of "
                     "each group of points, from each point's median step without the profiler where every point of the "
                     "group timed it (profiler.unprofiled_step), else its profiled median step (iteration.median), "
                     "as `step timed` says; dashed: ideal.",
                     [plots.against_ranks(scale, "speedup", "ideal", "speed-up",
                                          titled("How much faster with more ranks?", c.COUNTED)),
                      plots.against_ranks(scale, "efficiency_pct", 100.0, "parallel efficiency (%)",
                                          titled("How efficiently are the added ranks used?", c.COUNTED))],
                     table_html(scaling_table(scale), titled("Where the lost time went per step", c.COUNTED)))

    peaks = sweep.peak_shares(points)
    if not peaks.empty:
        found += words.peak_sentences(peaks)
        sources = peaks.drop_duplicates("reference")[["reference", "peak", "unit", "source"]]
        figures = [plots.peak_pct(peaks, titled("How close to the hardware's peak? Matmul TFLOP/s, bus bandwidth",
                                                c.COUNTED))] if peaks["pct"].notna().any() else []
        page.section("peaks", "% of hardware peak", "Matmul TFLOP/s against the GPU's dense peak for the precision; "
                     "bus bandwidth against NVLink (one node) or the network (several nodes), per direction. "
                     "Where each peak comes from:", figures, table_html(sources, "The peaks and their sources")
                     + attainable_html(points))
    return found + iteration_sections(page, points)


def attainable_html(points: list[sweep.Point]) -> str:
    """The points' rates against the ceilings measured in their own job (experiment `ceilings:`),
    beside the datasheet's %, the sources named once below; '' where no run measured any."""
    rows = points_attainable([(p.label, p.first) for p in points])
    if rows.empty:
        return ""
    shown = pd.DataFrame({"point": rows["point"], "figure": rows["figure"], "value": rows["value"],
                          "unit": rows["unit"], "% of ceiling": rows["pct_of_ceiling"], "ceiling": rows["ceiling"],
                          "measured at": rows["nearest_size"], "reached by": rows["ceiling_way"],
                          "% of datasheet": rows["pct_of_datasheet"]})
    sources = sorted({*rows["ceiling_source"], *rows["datasheet_source"]} - {""})
    return table_html(shown, "% of attainable: against hpcprof bench ceilings run in the same job after the workload "
                             "(the nearest measured size), and % of the datasheet peak") + \
        "<p>Sources: " + "; ".join(html.escape(s) for s in sources) + ".</p>"


def iteration_sections(page: Page, points: list[sweep.Point]) -> list[str]:
    """Per-iteration sections: stragglers (named above noise only), jitter and GPU idle per
    iteration, the critical path over the iterations."""
    found: list[str] = []
    strag, series = sweep.stragglers(points), sweep.per_iteration(points)
    idle = sweep.gpu_idle_per_iteration(points)
    found += words.stragglers(sweep.persistent_stragglers(points), sweep.straggler_outliers(points, strag), strag)
    found += words.idle_sentence(idle)
    figures = []
    if not strag.empty:
        figures.append(plots.per_iteration_lines(strag, "excess_ms", "slowest rank's excess over the median (ms)", titled(
            "Which iterations have a straggler, and how much does it cost?", c.COUNTED)))
    if not series.empty:
        figures.append(plots.per_iteration_lines(series, "time_ms", "iteration time, mean over ranks (ms)", titled(
            "Does the iteration time settle? Warm-up and jitter", f"{c.EACH_ITERATION} the workload timed, warm-up "
            "included")))
    if not idle.empty:
        figures.append(plots.per_iteration_lines(idle, c.ITERATION_IDLE_PCT.name, "GPU idle (%)", titled(
            "How idle is the GPU in each iteration?", f"{c.EACH_ITERATION} of the {sweep.window_note(points)}")))
    extra = ""
    if not strag.empty:
        table = strag.groupby(["point", "slowest_rank"], sort=False).agg(
            iterations=("iteration", "size"), median_excess_ms=("excess_ms", "median"),
            max_excess_ms=("excess_ms", "max")).reset_index()
        extra = table_html(table, titled("The slowest rank of each iteration, counted over each point's iterations",
                                         c.COUNTED))
    if figures:
        page.section("iterations", "Per iteration: stragglers and jitter",
                     "From each iteration's time on every rank. A straggler is named in the findings only above the "
                     "noise: the per-iteration spread and the repetitions' confidence interval.", figures, extra)
    critical = sweep.critical_path(points)
    if not critical.empty:
        held = sweep.critical_summary(critical)
        found += words.critical_sentences(held)
        by_rank = critical.assign(held_ms=critical["held_ns"] / 1e6).groupby(
            ["point", "critical_rank"], as_index=False)["held_ms"].sum()
        window = f"{c.EACH_ITERATION} of the {sweep.window_note(points)}"
        page.section("critical-path", "Critical path across ranks", "Which rank's work the others waited for, and "
                     "in which collective, over the iterations.",
                     [plots.grouped(by_rank, "critical_rank", "held_ms", "point", "time others waited, summed (ms)",
                                    titled("Which rank holds the others up?", window))],
                     table_html(critical_table(held), titled("Who held whom, how often, the median and worst wait",
                                                             window)))
    return found


def run_window(info: RunInfo, table: c.TableSpec) -> str:
    """The window of the run's `table`, in words: the catalog's, the measured window as the run names it."""
    named = measured_window(info) if table.window == c.MEASURED else ""
    return f"{c.MEASURED}: {named}" if named else table.window


def critical_table(held: pd.DataFrame) -> pd.DataFrame:
    """sweep.critical_summary for reading: who held whom, in how many iterations, the waits."""
    return pd.DataFrame({"point": held["point"], "who held whom": [words.held_words(r) for _, r in held.iterrows()],
                         "iterations": [f"{int(r['iterations'])} of {int(r['of'])}" for _, r in held.iterrows()],
                         "median wait": held["median_wait_ms"].map(words.wait_text),
                         "worst wait": held["worst_wait_ms"].map(words.wait_text),
                         "worst in": [f"iteration {int(r['worst_iteration'])}, run {r['worst_run']}"
                                      for _, r in held.iterrows()]})


def workload_figures(info: RunInfo) -> Iterator[go.Figure]:
    """seqpar / ddp: per-phase time per rank."""
    timing = c.WORKLOAD_TIMINGS.get(info.kind)
    rows = read_table(info.run.path, timing[1].name) if timing else None
    if rows is not None and not rows.empty:
        yield plots.phase_time_per_rank(counted(rows), titled("time per phase and rank", c.COUNTED))


def step_idle_figure(run: Path, table: c.TableSpec) -> Iterator[go.Figure]:
    """One typical step on every rank: the device's busy time and its idle gaps by cause and line."""
    step = read_table(run, table.name)
    if step is not None and not step.empty:
        yield plots.gantt(step, titled("one step on every rank: what the device does, why it waits",
                                       "the median step of the window (the idle's causes and lines)"))


def run_figures(info: RunInfo) -> Iterator[go.Figure]:
    """A run's figures, most telling first: its profile tool's (profilers.Profiler.figures), then the workload's."""
    profiler = profilers.find(info.tool)
    if profiler is not None and profiler.figures:
        make: Callable[[RunInfo], Iterator[go.Figure]] = load_target(profiler.figures)
        yield from make(info)
    yield from workload_figures(info)


def run_header(info: RunInfo) -> str:
    params = "".join(f"{k}={format_value(v)}; " for k, v in info.params.items())
    metrics = pd.DataFrame([(n, with_unit(v, u), metric_window(n)) for n, v, u in info.metrics],
                           columns=["metric", "value", "window"])
    text = (f"<p>{html.escape(info.kind)} on {info.record.world_size} rank(s), profile "
            f"{html.escape(info.tool)}; {html.escape(params)}state {html.escape(info.state)}"
            f"{' (' + html.escape(info.reason) + ')' if info.reason else ''}; {html.escape(str(info.run.path))}</p>")
    if stack := stack_lines(info.run, info.state):  # the stack of the rank the reason names
        text += f"<pre class='stack'>{html.escape(chr(10).join(stack))}</pre>"
    if info.overhead is not None:    # the profiler's perturbation of each step
        text += (f"<p class='{'warning' if info.overhead.warning else 'note'}'>"
                 f"{html.escape(info.overhead.sentence())}</p>")
    elif info.metrics and (note := unmeasured(info.tool)):
        text += f"<p class='note'>{html.escape(note)}</p>"
    if not metrics.empty:
        text += table_html(metrics, "Headline metrics, each over its window")
    if info.top:
        text += table_html(pd.DataFrame(info.top, columns=["name", "time_ms", "category"]),
                           f"Top kernels ({top_kernels_window(info.tool)})")
    if (bandwidth := busbw_summary(info.run.path, info.tool)) is not None:
        text += table_html(*bandwidth)
    return text


def metric_window(name: str) -> str:
    """The window of the headline metric `name` (its declaration in the catalog; '' for one not declared)."""
    metric = c.declared(name)
    return metric.window if metric is not None else ""


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
                 )
        if info.run.run_id in drawn:
            figures = list(run_figures(info))
            for fig in figures[:per_run]:
                page.figure(fig)
        page.add("</details>")
    page.add("</section>")


def unexplained(info: RunInfo) -> str:
    """Why a run has no metrics to explain: its state with the reason it carries, or what collect noted."""
    run = info.run.run_id
    if info.state != "COMPLETED":
        return (f"Run {run} {info.state}" + (f": {info.reason}" if info.reason else "")
                + f" (its logs: hpcprof logs {run} [--rank N]).")
    note = info.run.stored_collect()
    return f"Run {run} COMPLETED, nothing to explain collected: " + (
        f"collect noted {note}." if note else f"run `hpcprof collect {run}`.")


def diagnosis_section(points: list[sweep.Point]) -> str:
    """The first section: per point what limits it (the largest part of its step) and its top fixes
    with their bounds per step (hpcprof.report.limits); '' when no point can be diagnosed."""
    found = limits.diagnoses(points)
    if not found:
        return ""
    items = "".join(f"<li><p>{html.escape(limits.sentence(d))}</p><ol>"
                    + "".join(f"<li>{html.escape(line)}</li>" for line in limits.fix_lines(d)) + "</ol>"
                    + (f"<p>{html.escape(said)}</p>" if (said := limits.noise_line(d)) else "") + "</li>"
                    for d in found)
    return ("<section id='diagnosis'><h2>What limits each point, and the top fixes</h2><p>Each step split into "
            "compute, exposed communication, copies, GPU idle and imbalance over the measured window; each fix's "
            "saving is an upper bound per step; fixes below the point's noise are left out.</p>"
            f"<ul>{items}</ul>" + table_html(limits.diagnosis_table(found), "The parts of a step per point (ms per "
                                                                             "step, per rank)") + "</section>")


def build_html(infos: list[RunInfo], baseline: str | None = None) -> str:
    """The report as one HTML document (verdicts against run `baseline`, default: the first run)."""
    page = Page()
    points = sweep.sweep_points(infos, baseline)
    found = main_sections(page, points) if points else []
    diagnosis = diagnosis_section(points)
    body = "".join(page.parts)
    page.parts = []
    appendix(page, infos, points)
    title = f"hpcprof report: {infos[0].record.experiment.name}" if infos else "hpcprof report"
    state = ", ".join(f"{n} {s}" for s, n in pd.Series([i.state for i in infos]).value_counts().items())
    found += [unexplained(i) for i in infos if not i.metrics]
    items = "".join(f"<li>{html.escape(s)}</li>" for s in found)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            f"<h1>{html.escape(title)}</h1><p data-figures='{page.figures}'>{len(infos)} runs ({html.escape(state)}), "
            f"{len(points)} sweep point(s), {page.figures} figures.</p>"
            + diagnosis + f"<section id='findings'><h2>Findings</h2><ul>{items}</ul></section>"
            + body + "".join(page.parts) + "</body></html>")
