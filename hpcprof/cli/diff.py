"""`hpcprof diff A B`: two profiles (nsys exports or Kineto traces) compared over their measured
windows, per iteration time, kernel category, kernel and NCCL collective, with a verdict that
accounts for the noise of the iterations (hpcprof.report.diff)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcprof.cli.options import expand_paths, window_option
from hpcprof.core.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from hpcprof.analysis.diff.profiles import Profile

#: the terminal table's columns (DIFF_COLUMNS shown), never wrapped, and those left out first
#: where the terminal is too narrow
SHOWN = ["name", "A ms", "B ms", "change ms", "change %", "p", "verdict", "A n/it", "B n/it"]
WHOLE = ["A ms", "B ms", "change ms", "change %", "p", "verdict"]
OPTIONAL = ["A n/it", "B n/it", "p"]
#: the terminal's tables: (title, the sections of the diff table in it)
TABLES = (("Iteration time and kernel categories", ("iteration", "category")), ("NCCL collectives", ("collective",)),
          ("Kernels, the {top} whose time changed most", ("kernel",)))


def _load(argument: str, values: str, window: str, include_last_step: bool) -> Profile:
    """The profile of argument A or B; bad input as one line naming the argument."""
    from hpcprof.analysis.diff.profiles import DiffInputError, load_profile

    try:
        return load_profile(expand_paths([values], argument), window, include_last_step)
    except DiffInputError as exc:
        raise UserError(f"{argument}: {exc}") from None


def _cells(row: dict) -> dict:
    """A diff row as the terminal table shows it."""
    from hpcprof.report.stats import p_text
    from hpcprof.report.terminal import short_name

    def ms(value: float) -> str:
        return "" if math.isnan(value) else f"{value:,.3f}"

    def count(value: float) -> str:
        return "" if math.isnan(value) else f"{value:,.1f}".removesuffix(".0")

    return {"name": short_name(row["name"]), "A ms": ms(row["a_ms"]), "B ms": ms(row["b_ms"]),
            "change ms": "" if math.isnan(row["change_ms"]) else f"{row['change_ms']:+,.3f}",
            "change %": "" if math.isnan(row["change_pct"]) else f"{row['change_pct']:+.1f}",
            "p": "" if math.isnan(row["p_value"]) else p_text(row["p_value"]), "verdict": row["verdict"],
            "A n/it": count(row["a_count"]), "B n/it": count(row["b_count"])}


def _window(table: pd.DataFrame) -> str:
    """The windows of A and B, as a table's title names them."""
    first = table.iloc[0]
    windows = (f"window {first['a_window']}" if first["a_window"] == first["b_window"]
               else f"windows {first['a_window']} (A), {first['b_window']} (B)")
    return f"ms per iteration per rank over the {windows}, {first['a_iterations']} vs {first['b_iterations']} iterations"


@click.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@window_option("A Kineto trace: auto is its ProfilerSteps (else the steps found in its kernels), capture the "
               "whole trace; it has no NVTX ranges.")
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True,
              help="Kernels shown: those whose time per iteration changed most.")
@click.option("--include-last-step", is_flag=True,
              help="Keep a Kineto trace's last ProfilerStep (HTA drops it as possibly truncated).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the table, every column, as CSV to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the table, every column, as JSON instead.")
def diff(a: str, b: str, window: str, top: int, include_last_step: bool, csv_path: Path | None,
         as_json: bool) -> None:
    """Compare two profiles, A (the baseline) and B, over their measured windows.

    A and B are each an nsys export (.sqlite, or .nsys-rep exported with the nsys on PATH), a
    Kineto trace (.json, .json.gz), a quoted glob of per-rank files ('ws2/rank*.sqlite'), a
    directory of them, or an hpcprof run directory. Printed: the iteration time of A and B with
    its verdict and the largest significant changes, then per kernel category, NCCL collective and
    kernel the time per iteration (ms per rank) in A and B, the change, Welch's p over the
    iterations and a verdict: faster, slower, no significant change or untested (fewer than 2
    iterations).
    """
    from hpcprof.core.output import emit, emit_rows, write
    from hpcprof.report.diff import diff_table, headline

    base, other = _load("A", a, window, include_last_step), _load("B", b, window, include_last_step)
    if base.iterated != other.iterated:
        marked, whole = ("A", "B") if base.iterated else ("B", "A")
        raise UserError(f"A and B have no common window kind: {marked}'s is {(base if base.iterated else other).window} "
                        f"(iterations), {whole}'s the whole capture (no iteration marks nor steps found); give "
                        "--window capture to compare the whole captures")
    table = diff_table(base, other, top)
    if csv_path is not None:
        write(table, csv_path, "csv", inputs=[*base.files, *other.files], option="--csv")
    if as_json:
        emit(table, "json")
        return
    click.echo(headline(table))
    for title, sections in TABLES:
        rows = table[table["section"].isin(sections)]
        if len(rows):
            emit_rows([_cells(r) for r in rows.to_dict("records")], SHOWN, "table", out=sys.stdout,
                      title=f"{title.format(top=top)} ({_window(table)})", whole=WHOLE, optional=OPTIONAL,
                      every_column="--json")
