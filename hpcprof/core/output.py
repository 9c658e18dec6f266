"""Write a DataFrame (or plain rows) as csv, json or a rich table: the one output path of every
CLI report. pandas is imported only for DataFrames and rich only for tables, so the run commands
start fast (`status --format json` of 1,000 runs imports neither). Every cell leaves through
hpcprof.core.safe_text: rich tables hold Text (no markup, no control characters), CSV cells that a
spreadsheet would run are neutralised (and control characters shown as escapes on a terminal);
`write_spreadsheet` writes a table as CSV or .xlsx the same way."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from hpcprof.core.errors import printable
from hpcprof.core.safe_text import csv_cell, csv_frame, rich_text

if TYPE_CHECKING:
    import pandas as pd
    from rich.table import Table

FORMATS = ("csv", "table", "json")
#: the width of a table written to a file or a pipe (no terminal to fit)
WIDE = 200


def table_width(stream: TextIO | None) -> int | None:
    """The width to print a table at on `stream`: None (rich's console width: the terminal's) where it
    is a terminal; WIDE for a file or a pipe (`stream` None: a file being written)."""
    return None if stream is not None and stream.isatty() else WIDE


def render_table(df: pd.DataFrame, title: str | None = None) -> Table:
    """A rich Table of a DataFrame; numbers right-aligned."""
    header, right, columns = _frame_cells(df)
    return _rich_table(header, right, columns, title)


def _frame_cells(df: pd.DataFrame) -> tuple[list[str], list[bool], list[list[str]]]:
    """A DataFrame's header, which columns are numbers, and its columns of printable cells (taken by
    position: a repeated name is two columns)."""
    import pandas as pd

    series = [df.iloc[:, i] for i in range(df.shape[1])]
    return ([printable(str(c)) for c in df.columns], [pd.api.types.is_numeric_dtype(values) for values in series],
            [[printable(format_cell(v)) for v in values.tolist()] for values in series])


def _rich_table(header: Sequence[str], right: Sequence[bool], columns: Sequence[Sequence[str]],
                title: str | None) -> Table:
    """rich's Table of printable cells and title (Text: never parsed as markup), numbers right-aligned."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=None if title is None else rich_text(title), show_lines=False)
    for name, numeric in zip(header, right, strict=True):
        table.add_column(Text(name), justify="right" if numeric else "left")
    for row in zip(*columns, strict=True):
        table.add_row(*(Text(cell) for cell in row))
    return table


def format_cell(value: object) -> str:
    """Empty for missing, 6 significant digits for floats, str otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def emit(df: pd.DataFrame, fmt: str, out: TextIO | None = None, title: str | None = None) -> None:
    """Print `df` in format `fmt` (csv | table | json) to `out` (stdout by default)."""
    out = out or sys.stdout
    if fmt == "csv":
        csv_frame(df, terminal=out.isatty()).to_csv(out, index=False)
    elif fmt == "json":
        out.write(df.to_json(orient="records", indent=1))
        out.write("\n")
    elif fmt == "table":
        print_table(out, *_frame_cells(df), title)
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def print_table(out: TextIO, header: Sequence[str], right: Sequence[bool], columns: Sequence[Sequence[str]],
                title: str | None = None) -> None:
    """Print a table, given by its columns of printable cells (safe_text's rule: no control characters; the
    title is made so here), as rich's Table (heavy head, no row lines), numbers right-aligned where `right`,
    at table_width."""
    from rich.console import Console

    console = Console(file=out, width=table_width(out), emoji=False)
    console.print(_rich_table(header, right, columns, None if title is None else printable(title)))


#: the narrowest a wrapping column of emit_rows' table is taken to be when fitting it to a width
WRAP_MIN = 12


def emit_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str,
              out: TextIO | None = None, title: str | None = None, whole: Sequence[str] = (),
              optional: Sequence[str] = (), every_column: str = "--format json") -> None:
    """Print plain rows (dicts of str/int/float/None) like `emit` prints a DataFrame, without pandas.
    A table fits its width (table_width): the `whole` columns are never wrapped nor cut, the others
    wrap, and on a terminal the `optional` ones (least needed first) are left out, with a caption
    saying so, while the table cannot fit otherwise (a file or a pipe gets every column; the caption
    names `every_column`, the command's option that prints them all)."""
    out = out or sys.stdout
    if fmt == "csv":
        import csv

        terminal = out.isatty()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([["" if row.get(c) is None else csv_cell(row.get(c), terminal) for c in columns]
                          for row in rows])
    elif fmt == "json":
        import json

        out.write(json.dumps([{c: row.get(c) for c in columns} for row in rows], indent=1))
        out.write("\n")
    elif fmt == "table":
        from rich.console import Console
        from rich.table import Table

        width = table_width(out)
        console = Console(file=out, width=width, emoji=False)
        cells = {c: [rich_text(format_cell(row.get(c))) for row in rows] for c in columns}

        def needs(col: str) -> int:
            longest = max([len(col), *(len(v.plain) for v in cells[col])])
            return (longest if col in whole or col in optional else min(longest, max(len(col), WRAP_MIN))) + 3

        shown = list(columns)
        for col in optional if width is None else ():
            if sum(needs(c) for c in shown) + 1 <= console.width:
                break
            shown.remove(col)
        left_out = [c for c in columns if c not in shown]
        table = Table(title=None if title is None else rich_text(title), show_lines=False, caption_justify="left", caption=(
            f"not shown at {console.width} columns: {', '.join(left_out)} ({every_column} has every column)"
            if left_out else None))
        for col in shown:
            values = [row.get(col) for row in rows if row.get(col) is not None]
            numeric = bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            table.add_column(col, justify="right" if numeric else "left", no_wrap=col in whole,
                             overflow="fold", min_width=needs(col) - 3 if col in whole else None)
        for i in range(len(rows)):  # user text (a site's description, a reason) as plain text: no markup, no control characters
            table.add_row(*(cells[c][i] for c in shown))
        console.print(table)
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def write(df: pd.DataFrame, path: Path, fmt: str = "csv", inputs: Iterable[Path] = (), option: str = "-o") -> Path:
    """Write a user's output: `df` to `path` atomically (hpcprof.core.atomic: checked by
    safe_paths.check_output against `inputs` first, nothing half-written, a failure is one line
    naming the path)."""
    from hpcprof.core.atomic import write_text_stream

    return write_text_stream(path, lambda fh: emit(df, fmt, fh), inputs=inputs, option=option)


def write_spreadsheet(df: pd.DataFrame, path: Path, inputs: Iterable[Path] = (), what: str = "",
                      option: str = "-o") -> Path:
    """Write a user's output table as .xlsx (when `path` ends in .xlsx: openpyxl, as pandas'
    to_excel(index=False), every text a text cell, control characters shown as escapes) or else CSV (to_csv(index=False), formula-like
    text cells neutralised); atomically, checked as `write` is."""
    from hpcprof.core.atomic import atomic_write

    if path.suffix != ".xlsx":
        return atomic_write(path, csv_frame(df).to_csv(index=False), what=what, inputs=inputs, option=option)

    def excel(tmp: Path) -> None:
        import pandas as pd

        from hpcprof.core.safe_text import text_cells_only, xlsx_frame

        with pd.ExcelWriter(tmp, engine="openpyxl") as writer:
            xlsx_frame(df).to_excel(writer, index=False)
            for sheet in writer.sheets.values():
                text_cells_only(sheet)

    return atomic_write(path, excel, what=what, inputs=inputs, option=option, suffix=".xlsx")
