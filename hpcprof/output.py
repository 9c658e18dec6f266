"""Write a DataFrame (or plain rows) as csv, json or a rich table: the one output path of every
CLI report. pandas is imported only for DataFrames and rich only for tables, so the run commands
start fast (`status --format json` of 1,000 runs imports neither)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from hpcprof.errors import printable

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
    import pandas as pd
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for col in df.columns:
        table.add_column(str(col), justify="right" if pd.api.types.is_numeric_dtype(df[col]) else "left")
    for row in df.itertuples(index=False):
        table.add_row(*(format_cell(v) for v in row))
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
        df.to_csv(out, index=False)
    elif fmt == "json":
        out.write(df.to_json(orient="records", indent=1))
        out.write("\n")
    elif fmt == "table":
        from rich.console import Console

        Console(file=out, width=table_width(out), emoji=False).print(render_table(df, title))
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


#: the narrowest a wrapping column of emit_rows' table is taken to be when fitting it to a width
WRAP_MIN = 12


def emit_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str,
              out: TextIO | None = None, title: str | None = None, whole: Sequence[str] = (),
              optional: Sequence[str] = ()) -> None:
    """Print plain rows (dicts of str/int/float/None) like `emit` prints a DataFrame, without pandas.
    A table fits its width (table_width): the `whole` columns are never wrapped nor cut, the others
    wrap, and on a terminal the `optional` ones (least needed first) are left out, with a caption
    saying so, while the table cannot fit otherwise (a file or a pipe gets every column)."""
    out = out or sys.stdout
    if fmt == "csv":
        import csv

        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([["" if row.get(c) is None else row.get(c) for c in columns] for row in rows])
    elif fmt == "json":
        import json

        out.write(json.dumps([{c: row.get(c) for c in columns} for row in rows], indent=1))
        out.write("\n")
    elif fmt == "table":
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        width = table_width(out)
        console = Console(file=out, width=width, emoji=False)
        cells = {c: [printable(format_cell(row.get(c))) for row in rows] for c in columns}

        def needs(col: str) -> int:
            longest = max([len(col), *(len(v) for v in cells[col])])
            return (longest if col in whole or col in optional else min(longest, max(len(col), WRAP_MIN))) + 3

        shown = list(columns)
        for col in optional if width is None else ():
            if sum(needs(c) for c in shown) + 1 <= console.width:
                break
            shown.remove(col)
        left_out = [c for c in columns if c not in shown]
        table = Table(title=title, show_lines=False, caption_justify="left", caption=(
            f"not shown at {console.width} columns: {', '.join(left_out)} (--format json has every column)"
            if left_out else None))
        for col in shown:
            values = [row.get(col) for row in rows if row.get(col) is not None]
            numeric = bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            table.add_column(col, justify="right" if numeric else "left", no_wrap=col in whole,
                             overflow="fold", min_width=needs(col) - 3 if col in whole else None)
        for i in range(len(rows)):  # user text (a site's description, a reason) as plain text: no markup, no control characters
            table.add_row(*(Text(cells[c][i]) for c in shown))
        console.print(table)
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def write(df: pd.DataFrame, path: Path, fmt: str = "csv", inputs: Iterable[Path] = ()) -> Path:
    """Write `df` to `path` atomically (hpcprof.atomic: never one of `inputs`, nothing
    half-written, a failure is one line naming the path)."""
    from hpcprof.atomic import write_text_stream

    return write_text_stream(path, lambda fh: emit(df, fmt, fh), inputs=inputs)
