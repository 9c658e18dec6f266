"""Echo's `kernel_metric/ncu_report_process.py` (NetX-lab/Echo-slowdown), reproduced byte for byte,
for `hpcprof ncu metrics --layout echo`.

Echo exports its report twice, `ncu -i R --page details --csv --log-file temp/R_details.csv` and
`ncu -i R --print-kernel-base function --csv > temp/R_kshortname.csv` (the details page again,
kernel names as function base names), and reads both with `pandas.read_csv`'s defaults. Then:

* per kernel ID of the details page, in order of first appearance, the Metric Value of the first row
  (file order) whose Section Name and Metric Name equal each of eight pairs (`ECHO_METRICS`), None
  where no row does; units are ignored and nothing is converted;
* the value is what read_csv made of the whole `Metric Value` column: the printed text ("62.50",
  "0", "1,744") when any value in the column is not a number (ncu's string metrics and thousands
  separators make it so in practice), floats ("62.5", "100.0") when all are; read_csv's NA strings
  ("n/a", "NA", "null", empty) become empty cells, in the kernel names too;
* the kshortname export keeps the first row of each ID (`drop_duplicates`), and its `ID, Kernel
  Name` is inner-joined with the table on ID: kernels missing from either export are dropped, rows
  come in the kshortname export's order;
* `to_csv(index=False)` writes ID, Kernel Name, Compute throughput, SM, Memory throughput, DRAM
  throughput, Achieved occupancy, Maximum occupancy, L1 hit rate, L2 hit rate.

So on ncu < 2023 reports (metrics named "Compute (SM) [%]", "Memory [%]", no "# SMs") Echo's
Compute throughput, Memory throughput and SM are empty; hpcprof's own layout (`metrics.py`) reads
those names and the raw page, and gives numbers in one type.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprof.tools.ncu.analysis.parse import NcuInputError, export_report

if TYPE_CHECKING:
    import pandas as pd

SOL = "GPU Speed Of Light Throughput"
#: Echo's columns after ID and Kernel Name, each from one (Section Name, Metric Name) of the details page.
ECHO_METRICS: dict[str, tuple[str, str]] = {
    "Compute throughput": (SOL, "Compute (SM) Throughput"),
    "SM": ("Launch Statistics", "# SMs"),
    "Memory throughput": (SOL, "Memory Throughput"),
    "DRAM throughput": (SOL, "DRAM Throughput"),
    "Achieved occupancy": ("Occupancy", "Achieved Occupancy"),
    "Maximum occupancy": ("Occupancy", "Theoretical Occupancy"),
    "L1 hit rate": ("Memory Workload Analysis", "L1/TEX Hit Rate"),
    "L2 hit rate": ("Memory Workload Analysis", "L2 Hit Rate"),
}
RULE_ECHO = ("echo (Echo's kernel_metric/ncu_report_process.py: the first details-page value per kernel ID "
             "as read_csv parsed it, inner-joined on ID with the kshortname export's names, in its order)")
RULE_HPCPROF = ("hpcprof (numbers per kernel ID in ID order, ncu 2022 names and the raw page read, names "
                "from the demangled kernel name; Echo's kernel_metric_output.csv: --layout echo)")


@dataclass
class EchoMetrics:
    """Echo's table and what its rule did with the two exports."""

    table: pd.DataFrame
    details_ids: int          # kernel IDs of the details page
    named_ids: int            # kernel IDs of the kshortname export

    def summary(self) -> str:
        """The rule line of an Echo output: counts, dropped kernels, empty columns."""
        empty = [c for c in ECHO_METRICS if self.table[c].isna().all()] if len(self.table) else []
        text = (f"layout: {RULE_ECHO}; {len(self.table)} row(s) of {self.details_ids} kernel ID(s) in the "
                f"details page and {self.named_ids} in the kshortname export, "
                f"{self.details_ids - len(self.table)} dropped")
        if empty:
            text += f"; empty: {', '.join(empty)} (no value under Echo's section/metric name in the details page)"
        return text


def read_export(source: str | Path, text: str | None, what: str, columns: list[str]) -> pd.DataFrame:
    """One ncu CSV export read as Echo reads it (`pandas.read_csv` defaults): from `text` if given,
    else from the file `source`. NcuInputError names the file and what is wrong."""
    import pandas as pd

    try:
        df = pd.read_csv(io.StringIO(text) if text is not None else source)
    except FileNotFoundError:
        raise NcuInputError(f"{source}: no such file") from None
    except UnicodeDecodeError:
        raise NcuInputError(f"{source}: not ncu --csv output (binary or not UTF-8)") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise NcuInputError(f"{source}: not a {what} CSV export ({(str(exc).strip().splitlines() or [type(exc).__name__])[0]})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise NcuInputError(f"{source}: no {', '.join(map(repr, missing))} column; not a {what} CSV export "
                            f"(ncu --csv {'--print-kernel-base function' if what == 'kshortname' else '--page details'})")
    return df


def echo_table(details: pd.DataFrame, kshortname: pd.DataFrame, source: str = "details") -> EchoMetrics:
    """Echo's kernel_metric_output table of the two exports as read by `read_export`."""
    import pandas as pd

    ids = details["ID"]
    if ids.isna().any():
        raise NcuInputError(f"{source}: a row without a kernel ID (Echo's script fails on it)")
    if ids.empty:
        raise NcuInputError(f"{source}: no kernel rows after the header")
    column_of = {pair: col for col, pair in ECHO_METRICS.items()}
    first: dict[tuple[object, str], int] = {}  # (kernel ID, column) -> position of its first row
    pairs = zip(ids.to_numpy(), details["Section Name"].to_numpy(), details["Metric Name"].to_numpy(), strict=True)
    for pos, (kid, section, metric) in enumerate(pairs):
        col = column_of.get((section, metric)) if isinstance(section, str) and isinstance(metric, str) else None
        if col is not None and (kid, col) not in first:
            first[(kid, col)] = pos
    values = details["Metric Value"]
    records = []
    for kid in ids.unique():
        row: dict[str, object] = {"ID": kid}
        for col in ECHO_METRICS:
            at = first.get((kid, col))
            row[col] = None if at is None else values.iat[at]  # the scalar Echo's `.at[0, ...]` returns
        records.append(row)
    names = kshortname.drop_duplicates(subset="ID", keep="first")[["ID", "Kernel Name"]]
    try:
        table = pd.merge(names, pd.DataFrame(records), on="ID", how="inner")
    except ValueError as exc:  # IDs of different types in the two exports
        raise NcuInputError(f"{source}: the kernel IDs of the two exports do not match ({exc})") from None
    return EchoMetrics(table, len(records), int(names["ID"].nunique()))


def echo_metrics(details: Path, kshortname: Path | None = None, ncu: str | None = None) -> EchoMetrics:
    """Echo's table of a details CSV and its kshortname CSV, or of a .ncu-rep (both exported
    through ncu as Echo's run.sh exports them, unless `kshortname` is given)."""
    details_text: str | None = None
    names_text: str | None = None
    if details.suffix == ".ncu-rep":
        if not details.is_file():
            raise NcuInputError(f"{details}: no such file")
        details_text = export_report(details, ncu, "details")
        names_text = None if kshortname else export_report(details, ncu, "details", "--print-kernel-base", "function")
    elif kshortname is None:
        raise NcuInputError(f"{details}: --layout echo also needs Echo's second export: --kshortname "
                            f"FILE (ncu -i REPORT --print-kernel-base function --csv > FILE), or give the .ncu-rep")
    frame = read_export(details, details_text, "details", ["ID", "Section Name", "Metric Name", "Metric Value"])
    names = read_export(kshortname or details, names_text, "kshortname", ["ID", "Kernel Name"])
    return echo_table(frame, names, str(details))

