"""Read Nsight Compute CSV exports (`--page details`, `--page raw`) and `.ncu-rep` reports.

Both pages become one long table, one row per (kernel launch, metric):
`ID, Kernel Name, Section Name, Metric Name, Metric Unit, Metric Value`. Details rows keep
their section and display name ("Occupancy" / "Achieved Occupancy"); raw rows have an empty
section and the metric's real name ("sm__warps_active.avg.pct_of_peak_sustained_active").
`Metric Value` stays the printed text; `parse_number` and `to_base_unit` turn it into numbers.

Layouts handled: ncu 2022 (`Kernel Time` column), 2024/2025 (`Block Size`, `Device`, `CC`,
`Estimated Speedup` columns), metric rows shorter than the header (2025 ends them after
`Metric Value`), thousands separators ("17,984"), `==PROF==` and program output before the
header, auto-scaled units of both generations ("usecond"/"us", "Gbyte/second"/"Gbyte/s").
"""

from __future__ import annotations

import csv
import io
import math
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd

from hpcprof.core.safe_paths import read_regular

LONG_COLUMNS = ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
SUMMARY_MARKERS = {"Invocations", "Minimum", "Maximum", "Average"}

_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?$")
_TIME_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
            "s": 1e9, "second": 1e9}
_PER_TIME = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3,
             "s": 1.0, "second": 1.0}
_PREFIX = re.compile(r"^([KMGT])([a-z]+)$")
_PREFIX_FACTOR = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


class NcuInputError(ValueError):
    """A file that cannot be read as ncu output; the message names the file."""


def parse_number(text: str) -> float | None:
    """The number in an ncu value ("17,984", "0.74", "1,215,000,000.00"); None if not numeric."""
    s = text.strip()
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    try:
        value = float(s)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def to_base_unit(value: float, unit: str) -> tuple[float, str]:
    """`value` in `unit` converted to ncu's base unit: ns, byte, hz, per second (SI prefixes)."""
    num, _, den = unit.strip().partition("/")
    factor = 1.0
    if num in _TIME_NS:
        factor, num = _TIME_NS[num], "ns"
    elif m := _PREFIX.match(num):
        factor, num = _PREFIX_FACTOR[m.group(1)], m.group(2)
    if den in _PER_TIME:
        factor, den = factor / _PER_TIME[den], "s"
    if factor != 1.0:
        value = float(f"{value * factor:.15g}")  # 459.46 us -> 459460 ns, not 459460.00000000006
    return value, f"{num}/{den}" if den else num


def _records(text: str, source: str) -> tuple[list[str], list[list[str]]]:
    """Header and data rows of the ncu CSV inside `text` (`==PROF==`-style lines skipped)."""
    if not text.strip():
        raise NcuInputError(f"{source}: empty file")
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not line.startswith('"'):
            continue
        header = next(csv.reader([line]))
        if "Kernel Name" not in header:
            continue
        if SUMMARY_MARKERS <= set(header):
            raise NcuInputError(f"{source}: this is `ncu --print-summary` output; "
                                "export with --page details or --page raw instead")
        if header[0] != "ID":
            continue
        if not text.endswith(("\n", "\r")):
            raise NcuInputError(f"{source}: truncated (the last line is incomplete)")
        body = "".join(line for line in lines[i + 1:] if not line.startswith("=="))
        rows = [r for r in csv.reader(io.StringIO(body)) if r]
        if not rows:
            raise NcuInputError(f"{source}: no kernel results after the header")
        return header, rows
    raise NcuInputError(f"{source}: not ncu --csv output (no header line with \"ID\" and "
                        "\"Kernel Name\")")


def _kernel_ids(ids: pd.Series, source: str) -> pd.Series:
    """Kernel IDs as integers; NcuInputError on anything else."""
    numbers = pd.to_numeric(ids, errors="coerce")
    if numbers.isna().any():
        raise NcuInputError(f"{source}: non-numeric kernel ID {ids[numbers.isna()].iloc[0]!r}")
    return numbers.astype("int64")


def _details(header: list[str], rows: list[list[str]], source: str) -> pd.DataFrame:
    """Long table of a details page; rule rows (no metric name) are dropped."""
    idx = [header.index(c) for c in LONG_COLUMNS]
    need = max(idx) + 1
    out = []
    for n, row in enumerate(rows):
        if len(row) < need or len(row) > len(header):
            raise NcuInputError(f"{source}: malformed or truncated row {n + 1} after the header "
                                f"({len(row)} fields, header has {len(header)})")
        rec = [row[i] for i in idx]
        if rec[3]:
            out.append(rec)
    df = pd.DataFrame(out, columns=LONG_COLUMNS)
    return df.assign(ID=_kernel_ids(df["ID"], source))


def _raw(header: list[str], rows: list[list[str]], source: str) -> pd.DataFrame:
    """Long table of a raw page (one row per kernel, one column per metric, units row first)."""
    for n, row in enumerate(rows):
        if len(row) != len(header):
            raise NcuInputError(f"{source}: malformed or truncated row {n + 1} after the header "
                                f"({len(row)} fields, header has {len(header)})")
    if rows[0][0] != "":
        raise NcuInputError(f"{source}: raw page without its units row")
    if len(rows) == 1:
        raise NcuInputError(f"{source}: no kernel results after the header")
    wide = pd.DataFrame(rows[1:], columns=header)
    wide["ID"] = _kernel_ids(wide["ID"], source)
    metrics = [name for name in header if "__" in name]
    long = wide.melt(id_vars=["ID", "Kernel Name"], value_vars=metrics,
                     var_name="Metric Name", value_name="Metric Value")
    long.insert(2, "Section Name", "")
    long.insert(4, "Metric Unit", long["Metric Name"].map(dict(zip(header, rows[0], strict=False))))
    return long


def read_ncu_csv(text: str, source: str = "<csv>") -> pd.DataFrame:
    """Long metric table of one `ncu --csv` export (details or raw page) given as text."""
    header, rows = _records(text, source)
    if set(LONG_COLUMNS) <= set(header):
        return _details(header, rows, source)
    if any("__" in c for c in header):
        return _raw(header, rows, source)
    raise NcuInputError(f"{source}: ncu CSV of an unsupported page "
                        "(export with --page details or --page raw)")


def find_ncu(path: str | None = None) -> str | None:
    """The ncu executable: `path` if given, else `ncu` on PATH (None if there is none)."""
    return shutil.which(path) if path else shutil.which("ncu")


def export_report(report: Path, ncu: str | None, page: str, *options: str) -> str:
    """`ncu --import REPORT --csv --page PAGE [OPTIONS]` output; NcuInputError if ncu is missing or fails."""
    exe = find_ncu(ncu)
    if exe is None:
        where = f"{ncu!r} is not an executable" if ncu else "ncu is not on PATH"
        raise NcuInputError(f"{report}: reading a .ncu-rep needs Nsight Compute's ncu ({where}); "
                            f"pass --ncu PATH, or export it: ncu --import {report} --csv "
                            f"--page details > {report.stem}_details.csv")
    proc = subprocess.run([exe, "--import", str(report), "--csv", "--page", page, *options],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        why = (proc.stderr + proc.stdout).strip().splitlines()
        raise NcuInputError(f"{report}: ncu --import failed (exit {proc.returncode}): "
                            f"{why[0] if why else 'no output'}")
    return proc.stdout


def load(path: Path, ncu: str | None = None) -> pd.DataFrame:
    """Long metric table of a CSV export or a `.ncu-rep` (its details and raw pages, via ncu)."""
    if not path.exists():
        raise NcuInputError(f"{path}: no such file")
    if path.suffix == ".ncu-rep":
        pages = [read_ncu_csv(export_report(path, ncu, p), f"{path} ({p} page)")
                 for p in ("details", "raw")]
        return pd.concat(pages, ignore_index=True)
    try:
        text = read_regular(path, limit=None).decode("utf-8-sig", errors="strict")   # a FIFO or a device: refused; a byte-order mark, as Windows tools write
    except UnicodeDecodeError:
        raise NcuInputError(f"{path}: not ncu --csv output (binary or not UTF-8)") from None
    except OSError as exc:
        raise NcuInputError(f"{path}: {exc.strerror}") from None
    return read_ncu_csv(text, str(path))
