"""Profile and user text is data in every medium it leaves hpcprof by: one function per medium
Kernel and NVTX names, swept values, reasons, log lines and file names can hold
anything: rich markup, terminal escape sequences, HTML, spreadsheet formulas.

- the terminal: `hpcprof.core.errors.printable` (control characters shown as escapes: every message,
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
- a stream whose encoding lacks a character (`PYTHONIOENCODING=ascii`, a Latin-1 terminal):
  `honour_encoding` has every write to stdout and stderr give it its ASCII stand-in (`µs` as `us`,
  a table's box lines as `+-|`), in the stream's own encoding, whoever writes;
- HTML and plotly's labels (which render a subset of HTML, <a href> included): `plotly_escaped`
  escapes & < > in every text of a figure (data, hover text, names, titles, annotations); HTML
  written by hand uses html.escape.
"""

from __future__ import annotations

import codecs
import html
import io
import sys
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hpcprof.core.errors import printable

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go
    from rich.text import Text

#: how a spreadsheet formula can start (OWASP: = + - @, tab and carriage return)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


#: the ASCII stand-ins of the characters hpcprof's own text uses (others: stand_in)
STAND_INS = {"µ": "u", "·": ".", "−": "-", "–": "-", "—": "-", "Σ": "sum ", "→": "->", "←": "<-", "↔": "<->",
             "×": "x", "±": "+/-", "…": "...", "≤": "<=", "≥": ">=", "≈": "~", "∩": "&", "∈": " in ", "•": "*",
             "‘": "'", "’": "'", "“": '"', "”": '"'}
#: the name of the codecs error handler `honour_encoding` sets
STAND_IN = "hpcprof.stand-in"


def stand_in(char: str) -> str:
    """The ASCII a stream that cannot write `char` shows instead: STAND_INS, a box-drawing line as
    `-`, `|` or `+`, a superscript as `^N`, a letter's base letter (`é` -> `e`), else its escape."""
    if char in STAND_INS:
        return STAND_INS[char]
    name = unicodedata.name(char, "")
    if name.startswith("BOX DRAWINGS"):       # a line, else a corner or a junction
        line = " AND " not in name and ("HORIZONTAL" in name) != ("VERTICAL" in name)
        return ("-" if "HORIZONTAL" in name else "|") if line else "+"
    base = "".join(c for c in unicodedata.normalize("NFKD", char) if c.isascii() and c.isprintable())
    if base:
        return f"^{base}" if name.startswith("SUPERSCRIPT") else base
    return char.encode("ascii", "backslashreplace").decode("ascii")


def _stand_ins(error: UnicodeError) -> tuple[str, int]:
    """The codecs error handler STAND_IN: each character the encoding lacks as its stand_in."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return "".join(stand_in(c) for c in error.object[error.start:error.end]), error.end


codecs.register_error(STAND_IN, _stand_ins)


class DeclaredEncoding(io.TextIOBase):
    """A text stream written in its own encoding, lacking characters as their stand_in: it has no
    `buffer`, so that click, which takes an ASCII stream for a misconfigured one and writes UTF-8
    to its buffer instead, writes through it like everything else."""

    def __init__(self, stream: io.TextIOWrapper) -> None:
        self.stream = stream

    @property
    def encoding(self) -> str:      # type: ignore[override]
        return self.stream.encoding

    def write(self, text: str) -> int:
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True


def honour_encoding() -> None:
    """Have sys.stdout and sys.stderr write, where their encoding lacks a character hpcprof prints
    (`PYTHONIOENCODING=ascii`, a Latin-1 terminal), its stand_in in their own encoding, whatever
    writes (click, rich, print): rich then draws its tables in ASCII, as it does for such a stream."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        encoding = getattr(stream, "encoding", None)
        if not isinstance(stream, io.TextIOWrapper) or not encoding:
            continue
        try:
            "\u2503\u2501µ→".encode(encoding)
            continue
        except UnicodeEncodeError:
            pass
        except LookupError:
            continue
        stream.reconfigure(errors=STAND_IN)
        setattr(sys, name, DeclaredEncoding(stream))


def terminal_log(text: str) -> str:
    """Log text for a terminal: its lines and tabs kept, every other control character (escape
    sequences, carriage returns) shown as an escape."""
    return "\n".join("\t".join(printable(part) for part in line.split("\t")) for line in text.split("\n"))


def rich_text(value: object, style: str = "") -> Text:
    """`value` as a rich Text: never parsed as markup, control characters shown as escapes."""
    from rich.text import Text

    text = printable(str(value))
    if isinstance(sys.stdout, DeclaredEncoding):        # measured as the stream will show it
        text = text.encode(sys.stdout.encoding, STAND_IN).decode(sys.stdout.encoding)
    return Text(text, style=style)


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
