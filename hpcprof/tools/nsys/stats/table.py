"""A report as the columnar engine gives it (`Table`) and the one CSV writer that prints it exactly
as `nsys stats --format csv` does. The standard library only (numpy and pandas when a caller
brings them).

A Table holds its columns (numpy arrays or lists), one CSV cell format per column ("i" integer, "f1" one decimal, "f3"
three decimals, "s" text) and the text of NULL ("None" in nsys 2022.4's layout, "" in newer
nsys's).
"""

from __future__ import annotations

from hpcprof.tools.nsys.stats.schema import OLD

TYPE_CHECKING = False          # typing's constant without importing typing
if TYPE_CHECKING:
    from typing import Any, TextIO

    import numpy as np
    import pandas as pd

#: the eight standard summary columns ({count}: "Instances", "Num Calls" or "Count") and their cell formats
SUMMARY_COLS = ["Time (%)", "Total Time (ns)", "{count}", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                "StdDev (ns)"]
SUMMARY_FMT = ["f1", "i", "i", "f1", "f1", "i", "i", "f1"]
#: CSV cell format -> (printf format, the conversion before it)
CELL_FORMATS: dict[str, tuple[str, type]] = {"i": ("%d", int), "f1": ("%.1f", float), "f3": ("%.3f", float)}


def null_text(layout: str) -> str:
    """How the nsys of `layout` prints NULL in a CSV cell."""
    return "None" if layout == OLD else ""


class Table:
    """A report: its columns in row order (numpy arrays or lists), the CSV cell format of each
    and the text of NULL. `to_frame` gives the DataFrame (importing pandas then)."""

    __slots__ = ("columns", "formats", "null")

    def __init__(self, columns: dict[str, Any], formats: list[str], null: str) -> None:
        self.columns, self.formats, self.null = columns, formats, null

    @classmethod
    def from_rows(cls, names: list[str], formats: list[str], rows: list[tuple[Any, ...]], null: str) -> Table:
        """A table of `rows` (tuples in `names` order)."""
        by_column = list(zip(*rows, strict=True)) if rows else [() for _ in names]
        return cls({name: list(values) for name, values in zip(names, by_column, strict=True)}, formats, null)

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> Table:
        """The table of a DataFrame from `to_frame` (formats and NULL text in `attrs`; text otherwise)."""
        return cls({str(c): df[c].to_numpy(dtype=object) for c in df.columns},
                   df.attrs.get("formats", ["s"] * len(df.columns)), df.attrs.get("null", ""))

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def column_values(self) -> list[list[Any]]:
        """Each column as a list of Python values."""
        return [values.tolist() if hasattr(values, "tolist") else list(values) for values in self.columns.values()]

    def to_json(self) -> dict[str, Any]:
        """The table as a JSON document (each column's values and numpy dtype; floats exact)."""
        return {"columns": {name: [str(getattr(values, "dtype", "object")), values.tolist() if hasattr(values, "tolist")
                                   else list(values)] for name, values in self.columns.items()},
                "formats": self.formats, "null": self.null}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Table:
        """The table `to_json` gave (numpy columns of the same dtypes)."""
        import numpy as np

        columns = {name: np.array(values, dtype=dtype) if dtype != "object" else
                   np.array([*values, None], dtype=object)[:-1] for name, (dtype, values) in document["columns"].items()}
        return cls(columns, list(document["formats"]), str(document["null"]))

    def to_frame(self) -> pd.DataFrame:
        """The report as a DataFrame carrying its formats in `attrs`."""
        import pandas as pd

        df = pd.DataFrame(self.columns)
        df.attrs["formats"] = self.formats
        df.attrs["null"] = self.null
        return df


def make_table(columns: dict[str, Any], formats: list[str], order: np.ndarray | None = None,
               null: str = "None") -> Table:
    """A Table of numpy columns (rows in `order`)."""
    import numpy as np

    arrays = {k: (np.asarray(v, dtype=object) if np.asarray(v).dtype == object else np.asarray(v))
              for k, v in columns.items()}
    if order is not None:
        arrays = {k: v[order] for k, v in arrays.items()}
    return Table(arrays, formats, null)


#: numpy dtype kinds whose cells are numbers (and the NULL text): never quoted, never a formula
NUMBER_KINDS = ("i", "u", "f")


def _cells(values: list[Any], fmt: str, null: str, dtype_kind: str = "O") -> list[str]:
    """One column as CSV cells: NULL (None, NaN) as `null`, text as it is, numbers in `fmt`.
    `dtype_kind`: the numpy dtype kind the values came from; an integer or float column skips the
    per-cell type tests (with write_csv's quoting skipped: 18.5 k NVTX summary rows 0.075 -> 0.045 s)."""
    if dtype_kind in ("i", "u") and fmt == "i":
        return list(map(str, values))
    if dtype_kind == "f" and fmt in ("f1", "f3"):
        spec = CELL_FORMATS[fmt][0]
        return [spec % v if v == v else null for v in values]
    if fmt not in CELL_FORMATS:
        return [null if v is None or (isinstance(v, float) and v != v) else v if isinstance(v, str) else str(v)
                for v in values]
    spec, kind = CELL_FORMATS[fmt]
    return [null if v is None or (isinstance(v, float) and v != v) else v if isinstance(v, str) else spec % kind(v)
            for v in values]


def quoted(cells: list[str]) -> list[str]:
    """CSV cells quoted as Python's csv.writer (QUOTE_MINIMAL, "\\n" line ends) quotes them: a cell
    holding a comma, a double quote or a newline in double quotes, its quotes doubled."""
    return [f'"{c.replace(chr(34), chr(34) * 2)}"' if "," in c or '"' in c or "\n" in c else c for c in cells]


#: the first characters (safe_text.FORMULA_START) and the one inside a cell that make safe_text.csv_cell change it
RISKY_START, RISKY_INSIDE = ("=", "+", "-", "@", "\t", "\r"), "\r"


def _text_cells(cells: list[str], terminal: bool) -> list[str]:
    """A text column's cells through safe_text.csv_cell, imported only where a cell needs it."""
    if not terminal and not any(c.startswith(RISKY_START) or RISKY_INSIDE in c for c in cells):
        return cells
    from hpcprof.core.safe_text import csv_cell

    return [csv_cell(c, terminal) for c in cells]


def write_csv(report: Table | pd.DataFrame, out: TextIO) -> None:
    """Write a report as `nsys stats --format csv` does (header, cells, minimal quoting); a
    report with no rows is an empty file, as nsys 2022.4 and 2025 write it. Text that a
    spreadsheet would take for a formula (a kernel or NVTX name starting with =) is neutralised
    (safe_text.csv_cell), and on a terminal control characters are shown as escapes."""
    table = report if isinstance(report, Table) else Table.from_frame(report)
    if not len(table):
        return
    terminal = out.isatty()
    kinds = [getattr(getattr(c, "dtype", None), "kind", "O") for c in table.columns.values()]
    cols = [_cells(values, fmt, table.null, kind) if kind in NUMBER_KINDS and fmt in CELL_FORMATS  # nothing to quote
            else quoted(_cells(values, fmt, table.null) if fmt in CELL_FORMATS
                        else _text_cells(_cells(values, fmt, table.null), terminal))
            for values, fmt, kind in zip(table.column_values(), table.formats, kinds, strict=True)]
    if len(cols) == 1:                             # csv.writer's one exception: a row of one empty cell is ""
        cols = [['""' if c == "" else c for c in cols[0]]]
    out.write(",".join(quoted(list(table.columns))) + "\n")
    out.write("\n".join(map(",".join, zip(*cols, strict=True))) + "\n")
