"""`hpcprof nsys stats`: the reports of each export by the columnar engine, written as the
command writes them (`run_stats`, which cli.py's click command calls). Also the plumbing the other
`hpcprof nsys` commands share: `say`, `open_exports`, `emit`, `write`. Heavy libraries (numpy,
pandas, pyarrow, rich) are imported inside the functions that use them, so the command starts with
click and the standard library only.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from hpcprof.core.errors import UserError, printable
from hpcprof.tools.nsys.stats.schema import MissingData, NsysInputError
from hpcprof.tools.nsys.stats.stats import DEFAULT_REPORTS, NOT_COMPUTED, REPORTS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from contextlib import ExitStack
    from pathlib import Path
    from typing import Any, TextIO

    import pandas as pd

    from hpcprof.tools.nsys.stats.db import Export
    from hpcprof.tools.nsys.stats.table import Table

FORMATS = ("csv", "table", "json")     # = hpcprof.core.output.FORMATS (output imports rich: only for table/json)
EXTENSIONS = {"csv": "csv", "json": "json", "table": "txt"}


def say(path: Path | str, message: str) -> None:
    """One line on stderr naming the file."""
    text = message if message.startswith(str(path)) else f"{path}: {message}"
    sys.stderr.write(f"hpcprof nsys: {printable(text)}\n")
    sys.stderr.flush()


def open_exports(paths: Sequence[Path | str], stack: ExitStack, gpu: bool = True,
                 report: Callable[[Path, str], None] | None = None) -> tuple[list[Export], int]:
    """Open every file that is a usable export (with `gpu`: one with GPU operations; a .nsys-rep
    is first exported to SQLite in a temporary folder with the nsys on PATH); report the others
    (`report(path, why)`, default: a line on stderr, `say`). Returns (exports, failures)."""
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    from hpcprof.tools.nsys.stats.db import Export

    exports: list[Export] = []
    failures = 0
    scratch: Path | None = None
    for path in map(Path, paths):
        try:
            source = path
            if path.suffix == ".nsys-rep":
                nsys_exe = shutil.which("nsys")
                if nsys_exe is None:
                    raise NsysInputError(f"{path}: a .nsys-rep needs nsys to export it to SQLite; "
                                         "nsys is not on PATH (run `nsys export -t sqlite` where it is)")
                scratch = scratch or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hpcprof-nsys-")))
                from hpcprof.tools.nsys.analysis.collect import export_sqlite

                try:
                    source = export_sqlite(nsys_exe, path, scratch / str(len(exports) + failures))
                except subprocess.CalledProcessError as exc:
                    raise NsysInputError(
                        f"{path}: nsys export failed ({' '.join((exc.stderr or '').split())})") from None
            export = stack.enter_context(Export(source))
            export.check_usable(gpu)
        except NsysInputError as exc:
            (report or say)(path, str(exc))
            failures += 1
            continue
        exports.append(export)
    return exports, failures


#: `nsys stats --format table` cells: thousands separators, the CSV's decimals (7,541,095.4)
TABLE_CELLS = {"i": "{:,d}", "f1": "{:,.1f}", "f3": "{:,.3f}"}


def _table_column(values: Sequence[Any], fmt: str, null: str) -> list[str]:
    """A column's cells as `nsys stats --format table` shows them (`null` for None and NaN)."""
    if fmt in TABLE_CELLS:
        spec, number = TABLE_CELLS[fmt].format, int if fmt == "i" else float
        return [null if v is None or (isinstance(v, float) and v != v) else v if isinstance(v, str) else spec(number(v))
                for v in values]
    return [null if v is None or (isinstance(v, float) and v != v) else printable(str(v)) for v in values]


def _emit_stats_table(df: pd.DataFrame | Table, out: TextIO, title: str | None) -> None:
    """A stats report as a table with nsys's number formatting."""
    from hpcprof.core.output import print_table
    from hpcprof.tools.nsys.stats.table import Table

    table = df if isinstance(df, Table) else Table.from_frame(df)
    cells = [_table_column(values, fmt, table.null) for values, fmt in zip(table.column_values(), table.formats, strict=True)]
    print_table(out, [printable(name) for name in table.columns], [fmt in TABLE_CELLS for fmt in table.formats],
                cells, title)


def emit(df: pd.DataFrame | Table, fmt: str, out: TextIO, title: str | None = None) -> None:
    """A report (a Table, or a DataFrame with its formats) or an analysis's frame, in `fmt`."""
    from hpcprof.tools.nsys.stats.table import Table, write_csv

    if fmt in ("csv", "table") and (isinstance(df, Table) or "formats" in getattr(df, "attrs", {})):  # a report
        if fmt == "csv":
            write_csv(df, out)
        else:
            _emit_stats_table(df, out, title)
    else:
        from hpcprof.core.output import emit as emit_frame

        emit_frame(df, fmt, out, title=title)


def write(df: pd.DataFrame | Table | None, fmt: str, output: str | None, title: str,
          inputs: Sequence[Path | str] = ()) -> None:
    """`df` in `fmt` (None: nothing) to the file `output` (written whole or not at all, never over
    an input; its path on stderr), or to stdout."""
    if output is None:
        if df is not None:
            emit(df, fmt, sys.stdout, title)
        return
    from pathlib import Path

    from hpcprof.core.atomic import write_text_stream

    path = write_text_stream(Path(output), lambda fh: None if df is None else emit(df, fmt, fh, title),
                             inputs=[Path(p) for p in inputs])
    sys.stderr.write(f"wrote {printable(str(path))}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------
# nsys stats


#: what nsys stats has malloc keep (cpus.keep_freed_memory, in the command's own process): blocks up
#: to HEAP_BLOCK_BYTES (the ADBC driver's batch buffers, numpy's arrays) from the heap, and up to
#: KEPT_FREE_BYTES of it kept free, so that each batch and array of a large export does not fault
#: in and zero new pages
HEAP_BLOCK_BYTES = 32 << 20     # the most glibc takes on 64-bit
KEPT_FREE_BYTES = 1 << 30


def _outcomes(path: Path | str, names: list[str], fmt: str) -> list[Any] | None:
    """Each report of `path` (a Table, a DataFrame for table and JSON, or the MissingData/
    NsysInputError it raised); None (named on stderr) when the file is not a usable export."""
    from contextlib import ExitStack

    from hpcprof.tools.nsys.stats.stats import run_reports

    with ExitStack() as stack:
        exports, failed = open_exports([path], stack, gpu=False)
        return None if failed else run_reports(exports[0], names, frames=fmt != "csv")


def run_stats(files: Sequence[Path | str], names: list[str], fmt: str, prefix: str | None) -> int:
    """The reports `names` of each file in `fmt`: to PREFIX_<report>.<ext> (PREFIX_<file>_<report>.<ext>
    for several files) or stdout (each under a `# FILE REPORT` line where there are several); a
    report whose data the export lacks is named skipped on stderr, as nsys does (with a prefix, its
    file is written empty, as nsys 2022.4 writes it). Returns the number of files that could not be
    processed (each named on stderr)."""
    from hpcprof.core.cpus import keep_freed_memory

    keep_freed_memory(HEAP_BLOCK_BYTES, KEPT_FREE_BYTES)
    blocks = len(files) * len(names)
    failures = 0
    for path in files:
        outcomes = _outcomes(path, names, fmt)
        if outcomes is None:
            failures += 1
            continue
        for name, df in zip(names, outcomes, strict=True):
            if isinstance(df, NsysInputError):
                say(path, str(df))
                failures += 1
                break
            if isinstance(df, MissingData):
                say(path, f"{name} skipped: {df}")
            if prefix is not None:
                stem = f"{prefix}_{os.path.splitext(os.path.basename(path))[0]}" if len(files) > 1 else prefix
                write(None if isinstance(df, MissingData) else df, fmt, f"{stem}_{name}.{EXTENSIONS[fmt]}", name, files)
                continue
            if isinstance(df, MissingData):
                continue
            if blocks > 1:
                sys.stdout.write(f"# {printable(str(path))} {name}\n")
            emit(df, fmt, sys.stdout, f"{os.path.basename(path)}: {name}")
            if blocks > 1:
                sys.stdout.write("\n")
    sys.stdout.flush()
    return failures


def failed_files(failures: int, total: int) -> UserError:
    """The error that ends a command some of whose `total` input files could not be processed."""
    return UserError(f"{failures} of {total} input file(s) could not be processed (see messages above)")


def report_names(value: str | None) -> list[str] | None:
    """The reports of `-r VALUE` (comma separated; nsys's default set without -r, whose reports hpcprof
    does not compute are known too: skipped without their data); None when one is unknown."""
    if value is None:
        return list(DEFAULT_REPORTS)
    names = [r.strip() for r in value.split(",") if r.strip()]
    return names if all(r in REPORTS or r in NOT_COMPUTED for r in names) else None
