"""Profile and user text is data in every medium it leaves hpcprof by: one function per medium
Kernel and NVTX names, swept values, reasons, log lines and file names can hold
anything: rich markup, terminal escape sequences, HTML, spreadsheet formulas.

- the terminal: `hpcprof.errors.printable` (control characters shown as escapes: every message,
  error and warning line), `terminal_log` for a log (its lines and tabs kept), and every function
  below that ends on a terminal;
- rich (tables, titles, headers, messages): `rich_text` gives a `Text`, which rich never parses for
  markup (`[/]` stays text, `[link=...]` is no link), its control characters shown as escapes;
  `rich_markup` escapes a value put inside hpcprof's own markup;
- CSV and .xlsx (OWASP's CSV-injection guidance): `csv_cell` puts `'` before a text cell that
  starts with = + - @ tab or CR and is not a number, and shows a carriage return in it as \\r (a
  spreadsheet would start a row there; on a terminal every control character is shown as an
  escape); `csv_frame` applies it to every text cell and column name of a DataFrame; for .xlsx,
  `xlsx_frame` shows control characters as escapes (a worksheet cannot hold them) and
  `text_cells_only` makes every formula cell of an openpyxl sheet a text cell, so that Excel shows
  the text it holds and runs nothing;
- HTML and plotly's labels (which render a subset of HTML, <a href> included): `plotly_escaped`
  escapes & < > in every text of a figure (data, hover text, names, titles, annotations); HTML
  written by hand uses html.escape.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hpcprof.errors import printable

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go
    from rich.text import Text

#: how a spreadsheet formula can start (OWASP: = + - @, tab and carriage return)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def terminal_log(text: str) -> str:
    """Log text for a terminal: its lines and tabs kept, every other control character (escape
    sequences, carriage returns) shown as an escape."""
    return "\n".join("\t".join(printable(part) for part in line.split("\t")) for line in text.split("\n"))


def rich_text(value: object, style: str = "") -> Text:
    """`value` as a rich Text: never parsed as markup, control characters shown as escapes."""
    from rich.text import Text

    return Text(printable(str(value)), style=style)


def rich_markup(value: object) -> str:
    """`value` to put inside hpcprof's own rich markup: markup escaped, control characters shown as escapes."""
    from rich.markup import escape

    return escape(printable(str(value)))


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def csv_cell(value: Any, terminal: bool = False) -> Any:
    """A CSV cell: text a spreadsheet would take for a formula (it starts with = + - @ tab or CR and
    is not a plain number such as -1.5) with `'` in front, and a carriage return in it shown as \\r
    (CSV writers whose lines end in \\n leave it unquoted, and a spreadsheet starts a row there: the
    rest would be a cell of its own); with `terminal` (CSV printed on a terminal) every control
    character shown as an escape; other values as they are."""
    if not isinstance(value, str):
        return value
    if value.startswith(FORMULA_START) and not _number(value):
        value = "'" + value
    if terminal:
        return printable(value)
    return value.replace("\r", "\\r") if "\r" in value else value


def csv_frame(df: pd.DataFrame, terminal: bool = False) -> pd.DataFrame:
    """`df` with csv_cell applied to every text cell and column name; numeric columns untouched
    (`df` itself when nothing changes, else a copy)."""
    return _map_text(df, lambda value: csv_cell(value, terminal))


def xlsx_frame(df: pd.DataFrame) -> pd.DataFrame:
    """`df` for a .xlsx sheet: control characters (which a worksheet cannot hold) in its text cells
    and column names shown as escapes; formulas are dealt with by text_cells_only."""
    return _map_text(df, lambda value: printable(value) if isinstance(value, str) else value)


def _map_text(df: pd.DataFrame, cell: Callable[[Any], Any]) -> pd.DataFrame:
    """`df` with `cell` applied to every text cell and column name (`df` itself when nothing changes)."""
    import pandas as pd

    columns = [c for c in df.columns   # any column that may hold text (object, string, Arrow string ...)
               if not pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_datetime64_any_dtype(df[c])]
    names = {c: cell(c) for c in df.columns if isinstance(c, str) and cell(c) != c}
    changed = [c for c in columns if df[c].map(lambda v: cell(v) != v, na_action="ignore").any()]
    if not changed and not names:
        return df
    out = df.rename(columns=names) if names else df.copy()
    for column in changed:
        out[names.get(column, column)] = df[column].map(cell, na_action="ignore")
    return out


def text_cells_only(sheet: Any) -> None:
    """Make every formula cell of an openpyxl worksheet a text cell (openpyxl takes text starting
    with = for a formula): the cell keeps its text, a spreadsheet shows it and runs nothing."""
    for row in sheet.iter_rows():
        for cell in row:
            if cell.data_type == "f":
                cell.data_type = "s"


#: the figure attributes plotly draws as (pseudo-)HTML text
_TEXT_KEYS = {"text", "hovertext", "name", "x", "y", "labels", "customdata", "ids", "ticktext", "title",
              "legendgrouptitle", "header", "cells", "values"}


def _escaped(value: Any, under_text: bool) -> Any:
    if isinstance(value, str):
        return html.escape(value, quote=False) if under_text else value
    if isinstance(value, dict):
        return {k: _escaped(v, under_text or k in _TEXT_KEYS) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_escaped(v, under_text) for v in value)
    if under_text and hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "OUS":   # a numpy array of text
        import numpy as np

        return np.array([_escaped(v, True) for v in value.tolist()], dtype=object)
    return value


def plotly_escaped(fig: go.Figure) -> go.Figure:
    """A copy of `fig` whose texts (data values, hover texts, names, titles, tick texts, annotations)
    have & < > escaped: plotly renders them as HTML, where `<a href=...>` from a kernel name would be
    a live link; escaped, they show as the text they are. Templates (hovertemplate), which
    plotly's own labels are written in, are left as they are."""
    import plotly.graph_objects as go

    data = fig.to_plotly_json()
    return go.Figure({"data": [_escaped(trace, False) for trace in data.get("data", [])],
                      "layout": _escaped(data.get("layout", {}), False)})
