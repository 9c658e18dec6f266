"""Echo's kernel metric table (Echo-slowdown kernel_metric/ncu_report_process.py) and extra metrics.

Echo reads the details page and takes eight (section, metric) values per kernel ID. ncu 2022
names two of them differently ("Compute (SM) [%]", "Memory [%]"), 2022 reports have no
"# SMs", and a raw page has only metric names; so each column has a list of sources
(`ECHO_SOURCES`) and the first one present wins: details names first, then the raw metric
(sm__throughput…, device__attribute_multiprocessor_count, gpu__compute_memory_throughput…,
gpu__dram_throughput…, sm__warps_active…, sm__maximum_warps_per_active_cycle_pct,
l1tex__t_sector_hit_rate.pct, lts__t_sector_hit_rate.pct). A column whose section was not
collected stays empty. `Kernel Name` is the function base name (what Echo joined from
`ncu --print-kernel-base function`). Requested metrics ("Section/Metric" of the details page,
or a raw metric name) are converted to base units, which are named in the column header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from hpcprof.run.ranks import rank_from_filename
from hpcprof.tools.ncu.analysis.parse import NcuInputError, load, parse_number, to_base_unit

SOL = "GPU Speed Of Light Throughput"
ECHO_SOURCES: dict[str, list[tuple[str, str]]] = {
    "Compute throughput": [(SOL, "Compute (SM) Throughput"), (SOL, "Compute (SM) [%]"),
                           ("", "sm__throughput.avg.pct_of_peak_sustained_elapsed")],
    "SM": [("Launch Statistics", "# SMs"), ("", "device__attribute_multiprocessor_count")],
    "Memory throughput": [(SOL, "Memory Throughput"), (SOL, "Memory [%]"),
                          ("", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")],
    "DRAM throughput": [(SOL, "DRAM Throughput"),
                        ("", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")],
    "Achieved occupancy": [("Occupancy", "Achieved Occupancy"),
                           ("", "sm__warps_active.avg.pct_of_peak_sustained_active")],
    "Maximum occupancy": [("Occupancy", "Theoretical Occupancy"),
                          ("", "sm__maximum_warps_per_active_cycle_pct")],
    "L1 hit rate": [("Memory Workload Analysis", "L1/TEX Hit Rate"),
                    ("", "l1tex__t_sector_hit_rate.pct")],
    "L2 hit rate": [("Memory Workload Analysis", "L2 Hit Rate"), ("", "lts__t_sector_hit_rate.pct")],
}
ECHO_COLUMNS = ["ID", "Kernel Name", *ECHO_SOURCES]
#: The ncu section (`--section` identifier) each Echo column comes from.
ECHO_SECTION_IDS: dict[str, str] = {
    "Compute throughput": "SpeedOfLight", "SM": "LaunchStats", "Memory throughput": "SpeedOfLight",
    "DRAM throughput": "SpeedOfLight", "Achieved occupancy": "Occupancy",
    "Maximum occupancy": "Occupancy", "L1 hit rate": "MemoryWorkloadAnalysis",
    "L2 hit rate": "MemoryWorkloadAnalysis"}
_OPEN, _CLOSE = "(<[", ")>]"


def function_name(name: str) -> str:
    """Function base name of a demangled kernel name: no return type, scope, templates, arguments."""
    s = name.strip()
    for open_, close in ("()", "<>"):
        if s.endswith(close):
            depth = 0
            for i in range(len(s) - 1, -1, -1):
                depth += (s[i] == close) - (s[i] == open_)
                if depth == 0:
                    s = s[:i].rstrip()
                    break
    depth, start = 0, 0
    for i, c in enumerate(s):
        depth += (c in _OPEN) - (c in _CLOSE)
        if depth == 0 and (c == " " or s.startswith("::", i)):
            start = i + (2 if c == ":" else 1)
    return s[start:] or name


def metric_key(spec: str) -> tuple[str, str]:
    """(section, metric) of a --metric spec: "Section/Metric" (details page) or a raw metric name."""
    if "__" in spec and "/" not in spec:
        return "", spec
    section, sep, metric = spec.partition("/")
    if not sep or not section or not metric:
        raise ValueError(f"--metric {spec!r}: use \"Section Name/Metric Name\" (as in the details "
                         "page, e.g. \"Occupancy/Achieved Occupancy\") or a raw metric name")
    return section, metric


def _convert(text: str, unit: str) -> tuple[object, str]:
    """A printed value as a number in base units; text that is not a number stays text."""
    number = parse_number(text)
    if number is None:
        return (text or None), unit
    return to_base_unit(number, unit)


def _column(long: pd.DataFrame, ids: pd.Series, sources: list[tuple[str, str]]) -> tuple[list, set[str]]:
    """Per kernel ID the value of the first source present, and the units seen."""
    values: dict[int, object] = {}
    units: set[str] = set()
    for section, metric in sources:
        rows = long[(long["Section Name"] == section) & (long["Metric Name"] == metric)]
        for kid, text, unit in zip(rows["ID"], rows["Metric Value"], rows["Metric Unit"], strict=True):
            if kid not in values:
                value, base = _convert(text, unit)
                if value is not None:
                    values[kid] = value
                    units.add(base)
    return [values.get(k) for k in ids], units


def _table(long: pd.DataFrame, metrics: Sequence[str]) -> tuple[pd.DataFrame, dict[str, set[str]]]:
    """Echo's table of one profile with requested metrics named by spec, and their units."""
    kernels = long.drop_duplicates("ID").sort_values("ID")
    out = pd.DataFrame({"ID": kernels["ID"].to_numpy(),
                        "Kernel Name": kernels["Kernel Name"].map(function_name).to_numpy()})
    wanted = {m for sources in ECHO_SOURCES.values() for _, m in sources}
    long = long[long["Metric Name"].isin(wanted | {metric_key(s)[1] for s in metrics})]
    units: dict[str, set[str]] = {}
    for col, sources in ECHO_SOURCES.items():
        out[col] = _column(long, out["ID"], sources)[0]
    for spec in metrics:
        out[spec], units[spec] = _column(long, out["ID"], [metric_key(spec)])
    return out, units


def _finish(df: pd.DataFrame, units: dict[str, set[str]]) -> pd.DataFrame:
    """Echo's percentages as floats, SM as integers, requested metrics as numbers where all are
    (integers where all are whole), metric units in the headers."""
    for col in ECHO_SOURCES:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64" if col == "SM" else "float64")
    for col in units:
        values = pd.to_numeric(df[col], errors="coerce")
        if values.notna().sum() == df[col].notna().sum():
            whole = values.dropna()
            df[col] = values.astype("Int64") if (whole == whole.round()).all() else values
    labels = {s: f"{s} [{'|'.join(sorted(u))}]" for s, u in units.items() if u - {""}}
    return df.rename(columns=labels)


def kernel_table(long: pd.DataFrame, metrics: Sequence[str] = ()) -> pd.DataFrame:
    """Echo's table (ECHO_COLUMNS) of one long metric table (see parse.load), plus `metrics`."""
    df, units = _table(long, metrics)
    return _finish(df, units)


def missing_sections(df: pd.DataFrame) -> list[str]:
    """One line per Echo column that is empty in every row: the ncu section it needs."""
    if df.empty:
        return []
    return [f"column {col!r} is empty: profile with --section {ECHO_SECTION_IDS[col]}"
            for col in ECHO_SOURCES if col in df and df[col].isna().all()]


def metrics_table(files: Sequence[Path], metrics: Sequence[str] = (), ncu: str | None = None,
                  ranks: Mapping[Path, int] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Echo's table of several profiles (one per rank) and one message per file that failed.

    With several files, or with `ranks` given, a `rank` column (from `ranks`, else `rank<N>` in
    the file name) and a `file` column come first. A requested metric found in no file is an error.
    """
    for spec in metrics:
        metric_key(spec)                    # a bad spec fails before any file is read
    tables, errors = [], []
    units: dict[str, set[str]] = {s: set() for s in metrics}
    for path in files:
        try:
            df, found = _table(load(path, ncu), metrics)
        except NcuInputError as exc:
            errors.append(str(exc))
            continue
        if ranks is not None or len(files) > 1:
            rank = ranks.get(path) if ranks is not None else rank_from_filename(path)
            df.insert(0, "file", path.name)
            df.insert(0, "rank", pd.array([rank] * len(df), dtype="Int64"))
        for spec, u in found.items():
            units[spec] |= u
        tables.append(df)
    errors += [f"metric {s!r} not found in any input" for s, u in units.items() if tables and not u]
    if not tables:
        return pd.DataFrame(columns=ECHO_COLUMNS + list(metrics)), errors
    return _finish(pd.concat(tables, ignore_index=True), units), errors
