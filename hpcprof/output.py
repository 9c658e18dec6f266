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

        Console(file=out, width=200, emoji=False).print(render_table(df, title))
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def emit_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str,
              out: TextIO | None = None, title: str | None = None) -> None:
    """Print plain rows (dicts of str/int/float/None) like `emit` prints a DataFrame, without pandas."""
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

        table = Table(title=title, show_lines=False)
        for col in columns:
            values = [row.get(col) for row in rows if row.get(col) is not None]
            numeric = bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            table.add_column(col, justify="right" if numeric else "left")
        for row in rows:  # user text (a site's description, a reason) as plain text: no markup, no control characters
            table.add_row(*(Text(printable(format_cell(row.get(c)))) for c in columns))
        Console(file=out, width=200, emoji=False).print(table)
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def write(df: pd.DataFrame, path: Path, fmt: str = "csv", inputs: Iterable[Path] = ()) -> Path:
    """Write `df` to `path` atomically (hpcprof.atomic: never one of `inputs`, nothing
    half-written, a failure is one line naming the path)."""
    from hpcprof.atomic import write_text_stream

    return write_text_stream(path, lambda fh: emit(df, fmt, fh), inputs=inputs)
