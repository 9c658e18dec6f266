"""Write a DataFrame as csv, json or a rich table: the one output path of every CLI report."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import TextIO

import pandas as pd
from rich.console import Console
from rich.table import Table

FORMATS = ("csv", "table", "json")


def render_table(df: pd.DataFrame, title: str | None = None) -> Table:
    """A rich Table of a DataFrame; numbers right-aligned."""
    table = Table(title=title, show_lines=False)
    for col in df.columns:
        justify = "right" if pd.api.types.is_numeric_dtype(df[col]) else "left"
        table.add_column(str(col), justify=justify)
    for row in df.itertuples(index=False):
        table.add_row(*(format_cell(v) for v in row))
    return table


def format_cell(value: object) -> str:
    """Empty for missing, 6 significant digits for floats, str otherwise."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
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
        Console(file=out, width=200).print(render_table(df, title))
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def write(df: pd.DataFrame, path: Path, fmt: str = "csv") -> Path:
    """Write `df` to `path` atomically (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")  # unique: concurrent writers
    try:
        with tmp.open("w") as fh:
            emit(df, fmt, fh)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
