"""The terminal report: a headline block per run (parameters, state, duration, metrics), numbers
with units and thousands separators as `nsys stats` prints them, failed runs with their reason and
log tail, long per-event tables only with `--full`. A run's block needs no pandas (its headline is
collect's note) except for its bus bandwidth table, where it has one; the comparison of several runs does."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from hpcprof import profilers
from hpcprof.core.catalog import BENCH_CEILINGS, RUN, parse_column, table_window
from hpcprof.core.output import render_table
from hpcprof.core.safe_paths import read_tail
from hpcprof.core.safe_text import rich_markup, rich_text
from hpcprof.report.ceilings import run_attainable, terminal_table
from hpcprof.report.overhead import unmeasured
from hpcprof.report.runs import RunInfo
from hpcprof.run.results import list_tables, read_table
from hpcprof.run.rundir import LOG_TAIL_BYTES, sweep_of

if TYPE_CHECKING:
    import pandas as pd

LOG_TAIL = 15
#: the longest kernel or range name a figure's legend or the comparison's table shows
NAME_CHARS = 48


def format_value(value: Any, unit: str = "") -> str:
    """`1,234.5` style: thousands separators, 1-3 decimals by magnitude, ints as ints."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if unit == "rank" or isinstance(value, (int,)) and not isinstance(value, bool):
        return f"{int(value):,}"
    if not isinstance(value, float):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.1f}"
    if magnitude >= 1:
        return f"{value:,.2f}"
    return f"{value:.3g}"


def short_name(name: str, chars: int = NAME_CHARS) -> str:
    """A kernel's or range's name for a legend or a table's cell: without a leading `void ` and a
    trailing argument list, cut to `chars` characters with an ellipsis (the whole name is in the
    hover, the CSV and the JSON)."""
    text = name.removeprefix("void ")
    if text.endswith(")") and "(" in text:
        text = text[:text.rindex("(")] or text
    return text if len(text) <= chars else text[:chars - 1] + "…"


def with_unit(value: Any, unit: str) -> str:
    text = format_value(value, unit)
    return f"{text} {unit}" if text and unit not in ("", "rank") else text


def short_runs(runs: str) -> str:
    """`S-p000,S-p001` -> `S-p000,p001`: the folded runs of one sweep point, readable."""
    ids = runs.split(",")
    return ",".join([ids[0]] + [i.rpartition("-")[2] if sweep_of(i) == sweep_of(ids[0]) else i for i in ids[1:]])


def comparison_table(df: pd.DataFrame) -> Table:
    """The comparison transposed for reading: a column per run (or sweep point), a row per
    parameter and metric; `mean ± half-width of the 95 % confidence interval` for folded
    repetitions, `(×r)` ratios to the baseline, then the verdicts against it."""
    import pandas as pd

    from hpcprof.report.compare import TOP_KERNEL, WINDOW, metric_columns, param_columns, point_labels
    from hpcprof.report.stats import p_text

    caption = "± : 95 % confidence interval of the mean over repetitions (Student t, n - 1 dof)" \
        if any(c.endswith(" ci95") for c in df.columns) else None
    if "verdict" in df:
        tests = sorted({str(t) for t in df["test"] if t and str(t) != "the baseline"})
        caption = "; ".join([*([caption] if caption else []), f"verdicts at the 5 % level: {'; '.join(tests)}"])
    table = Table(show_lines=False, caption=caption, caption_justify="left")

    def add_row(*cells: str) -> None:   # swept values, metric and kernel names as plain text
        table.add_row(*(rich_text(cell) for cell in cells))

    table.add_column("")
    labels = list(point_labels(df, param_columns(df)))
    for i, run in enumerate(df["run"]):
        table.add_column(rich_text(labels[i] if labels[i] else str(run)), justify="right")
    add_row("run", *[short_runs(r) for r in df["run"]])
    for col in param_columns(df) + ["world_size", "state"] + [c for c in ("n", WINDOW) if c in df]:
        add_row(col, *[format_value(v) for v in df[col]])
    for col in metric_columns(df):
        if col.endswith("/base"):
            continue
        name, unit = parse_column(col) or (col, "")
        cells = []
        for i in df.index:
            cell = with_unit(df.at[i, col], unit)
            ci = df.at[i, f"{col} ci95"] if f"{col} ci95" in df else None
            if cell and ci is not None and pd.notna(ci):
                cell = f"{format_value(df.at[i, col], unit)} ± {with_unit(ci, unit)}"
            ratio = df.at[i, f"{col} /base"] if f"{col} /base" in df else None
            if cell and ratio is not None and pd.notna(ratio):
                cell += f" (×{ratio:.2f})"
            cells.append(cell)
        add_row(name, *cells)
    if TOP_KERNEL in df:
        add_row(TOP_KERNEL, *[short_name(str(v)) if pd.notna(v) else "" for v in df[TOP_KERNEL]])
    if "verdict" in df:
        add_row("iteration time change", *[f"{v:+.2f} %" if pd.notna(v) else "" for v in df["change_pct"]])
        add_row("p (Welch)", *[p_text(v) if pd.notna(v) else "" for v in df["p_value"]])
        add_row("verdict", *[str(v) for v in df["verdict"]])
    return table


def duration(info: RunInfo) -> str:
    status = info.run.job_status()
    start, end = status.get("start", ""), status.get("end", "")
    if start.isdigit() and end.isdigit():
        return f"{int(end) - int(start):,} s"
    return "running" if start.isdigit() else "not started"


def log_files(run_dir: Path) -> list[Path]:
    logs = run_dir / "logs"
    return sorted(logs.glob("*")) if logs.is_dir() else []


def tail(path: Path, lines: int = LOG_TAIL) -> list[str]:
    """The last `lines` lines of a log (of its last LOG_TAIL_BYTES: a FIFO or a device is not read)."""
    try:
        return read_tail(path, LOG_TAIL_BYTES).decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def top_kernels_window(tool: str) -> str:
    """What the top kernels' times are: per rank, over the window of the tool's kernels table."""
    profiler = profilers.find(tool)
    table = profiler.table("kernels") if profiler is not None else None
    return f"GPU time per rank, {table_window(table, profilers.catalogs()) if table else RUN}"


#: the bus bandwidth table's title in both reports, and how many of its rows they show (most time first)
BUSBW_TITLE, BUSBW_ROWS = "bus bandwidth per collective and message size", 8


def busbw_summary(run_dir: Path, tool: str) -> tuple[pd.DataFrame, str] | None:
    """The run's bus bandwidth table for reading (its rows across ranks, else its one rank's; the
    BUSBW_ROWS with the most time) and its title with the window and how many kernels have no size;
    None where the run has none (read with pandas only where it has one)."""
    profiler = profilers.find(tool)
    name = profiler.table("busbw") if profiler is not None else None
    if name is None or name not in list_tables(run_dir):
        return None
    import pandas as pd

    table = read_table(run_dir, name)
    if table is None or table.empty:
        return None
    rows = table[table["scope"] == "all"] if (table["scope"] == "all").any() else table
    rows = rows.assign(time_ms=rows["count"] * rows["median_ns"] / 1e6).nlargest(BUSBW_ROWS, "time_ms")
    shown = rows.assign(size=(rows["bytes"] / 2**20).round(2), median_us=(rows["median_ns"] / 1e3).round(1),
                        algbw_gbps=rows["algbw_gbps"].round(1), busbw_gbps=rows["busbw_gbps"].round(1),
                        skew=[f"rank {s:.0f} {sb:.1f} vs rank {f:.0f} {fb:.1f}" if pd.notna(s) else ""
                              for s, sb, f, fb in zip(rows["slowest_rank"], rows["slowest_busbw_gbps"],
                                                      rows["fastest_rank"], rows["fastest_busbw_gbps"], strict=True)])
    columns = ["collective", "group", "bucket", "count", "size", "median_us", "algbw_gbps", "busbw_gbps", "skew"]
    names = ["collective", "group", "size bucket", "count", "MiB (median)", "median µs", "algbw GB/s", "busbw GB/s",
             "slowest vs fastest rank (busbw GB/s)"]
    ceilings = read_table(run_dir, BENCH_CEILINGS.name) if BENCH_CEILINGS.name in list_tables(run_dir) else None
    if ceilings is not None and not ceilings.empty:
        from hpcprof.report.ceilings import collective_attainable

        shown = shown.assign(attainable=collective_attainable(rows, ceilings))
        columns.insert(8, "attainable")
        names.insert(8, "% of attainable (ceiling's size)")
    shown = shown[columns]
    shown.columns = names
    unknown = int(table.loc[(table["scope"] == rows["scope"].iloc[0]) & table["bytes"].isna(), "count"].sum())
    return shown, f"{BUSBW_TITLE} ({table_window(name, profilers.catalogs())})" + \
        (f"; {unknown} NCCL kernels without a size ({name}'s note says why)" if unknown else "") + \
        ("; % of attainable: of hpcprof bench ceilings in the same job, the same collective nearest in size"
         if "attainable" in columns else "")


def headline(info: RunInfo, out: Console) -> None:
    """The run's header, parameters, state and duration, its metrics, and for a failed run the
    reason and the tail of its logs."""
    run = info.run
    out.rule(f"[bold]{rich_markup(run.run_id)}[/]  {rich_markup(info.record.experiment.name)}  "
             f"{rich_markup(info.state)}")
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    rows = [*((key, format_value(value)) for key, value in info.params.items()),
            ("workload", f"{info.kind} on {info.record.world_size} rank(s), profile {info.tool}"),
            ("state", info.state + (f" ({info.reason})" if info.reason else "")),
            ("duration", duration(info)), ("directory", str(run.path))]
    for key, text in rows:   # swept values, a reason, a path: plain text
        head.add_row(rich_text(key), rich_text(text))
    out.print(head)
    failed = info.state not in ("COMPLETED", "RUNNING", "PENDING")
    if failed:      # the cause first, before any number of the run
        failure(info, out)
    if info.overhead is not None:   # the profiler's slowdown before any number it slowed
        out.print(("[yellow]warning[/]: " if info.overhead.warning else "") + rich_markup(info.overhead.sentence()),
                  highlight=False)
    elif info.metrics and (note := unmeasured(info.tool)):
        out.print(rich_text(note), highlight=False)
    if info.metrics:
        table = Table(title="headline metrics", title_justify="left")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for name, value, unit in info.metrics:
            table.add_row(rich_text(name), rich_text(with_unit(value, unit)))
        out.print(table)
        reached = run_attainable(info)   # the run's rates against its ceilings (experiment `ceilings:`)
        if not reached.empty:
            out.print(terminal_table(reached))
    if info.top:
        top = Table(title=f"top kernels ({top_kernels_window(info.tool)})", title_justify="left")
        top.add_column("name")
        top.add_column("time", justify="right")
        top.add_column("category")
        for name, time_ms, category in info.top:  # a kernel's name as plain text: no markup
            top.add_row(rich_text(name), with_unit(time_ms, "ms"), rich_text(category))
        out.print(top)
    if (bandwidth := busbw_summary(run.path, info.tool)) is not None:
        out.print(render_table(*bandwidth))
    if not failed and not info.metrics and info.state == "COMPLETED" and not list_tables(run.path):
        out.print(rich_text(f"not collected yet: run `hpcprof collect {run.run_id}`"))


def failure(info: RunInfo, out: Console) -> None:
    """Reason (and the stack of the rank it names), the tail of the job log and of the last-written
    rank log, and where the logs are."""
    from hpcprof.analysis.forensics.verdict import stack_lines

    logs = log_files(info.run.path)
    out.print(Text.assemble(rich_text(info.state, "red"), ": ", rich_text(info.reason or "no reason recorded")))
    for line in stack_lines(info.run, info.state):  # the stack of the rank the reason names
        out.print(rich_text("  " + line))
    ranks = [p for p in logs if p.name.startswith("rank")]
    shown = [p for p in logs if p.name == "job.out"]
    if ranks:
        shown.append(max(ranks, key=lambda p: p.stat().st_mtime))
    for path in shown:
        out.print(f"[bold]last lines of {rich_markup(path)}[/]:")
        for line in tail(path):   # the job's own output: its escape sequences shown, not run
            out.print(rich_text("  " + line), highlight=False)
    out.print(rich_text(f"logs: {info.run.path / 'logs'} (hpcprof logs {info.run.run_id} [--rank N])"))


def full_tables(info: RunInfo, out: Console, rows: int) -> None:
    """Every result table of the run (first `rows` rows each)."""
    for name in list_tables(info.run.path):
        if name.startswith("files_"):
            continue
        df = read_table(info.run.path, name)
        if df is not None:
            out.print(render_table(df.head(rows), title=f"{name} ({len(df):,} rows)"))


def report(infos: list[RunInfo], full: bool, rows: int, out: Console) -> None:
    """Headline blocks of every run, then (with `full`) their result tables; for several runs of
    one workload, the comparison (repetitions folded into mean ± sd) last."""
    for info in infos:
        headline(info, out)
        if full:
            full_tables(info, out, rows)
    collected = [i for i in infos if i.metrics]
    if len(collected) > 1 and len({i.kind for i in collected}) == 1:
        from hpcprof.report.compare import comparison, fold_repetitions

        out.rule("[bold]comparison[/]")
        out.print(comparison_table(fold_repetitions(comparison(collected))))
    out.print(f"[dim]{time.strftime('%Y-%m-%d %H:%M:%S')}; --full for every result table[/]")
