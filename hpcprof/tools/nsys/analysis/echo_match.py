"""Echo's own matching rule (NetX-lab/Echo-slowdown, slowdown_collection/analyse.py), reproduced
cell for cell, for `hpcprof nsys slowdown --match echo`.

Echo's rule, per device of one export: the compute kernels are the rows of
CUPTI_ACTIVITY_KIND_KERNEL (in table order) whose short name is set and not LIKE '%nccl%' (ASCII
case-insensitive), whose demangled name is set and whose duration (end − start) is > 0; their `id`
is 1, 2, ... in that order. A kernel's overlap time is the sum, over every NCCL kernel of the same
device, of its intersection with the kernel — summed again over every compute kernel with the same
(device, start, end), and NULL when the device has no NCCL kernel. The world-size-1 and world-size-N
tables are joined on equal `id` and device and kept where the demangled names are equal; every
kernel after an extra or missing launch is shifted and dropped. slowdown = (dur_N − dur_1) /
(overlap_ratio · dur_1), the integer 0 when overlap_ratio = 0, empty when it is NULL.

hpcprof's default rule (distributed.slowdown) matches by name and occurrence instead."""

from __future__ import annotations

import sqlite3
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

ECHO_COLUMNS = ["id", "kShortName", "kDemangledName", "ground_truth", "duration", "overlap_ratio", "slowdown"]
RULE_ECHO = "echo (launch index + equal demangled name, Echo's analyse.py)"
RULE_HPCPROF = "hpcprof (name + occurrence)"
_KERNELS = """SELECT k.start, k."end", k.deviceId, s.value, d.value
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
LEFT JOIN StringIds AS s ON s.id = k.shortName
LEFT JOIN StringIds AS d ON d.id = k.demangledName
ORDER BY k.rowid"""


@dataclass(frozen=True)
class EchoKernel:
    """One row of Echo's per-device compute table."""

    id: int
    short: str
    demangled: str
    duration: int
    overlap_ratio: float | None


def _is_nccl(short: str) -> bool:
    """SQLite's `LIKE '%nccl%'`: case-insensitive for ASCII letters only."""
    return "nccl" in short.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def echo_tables(path: Path) -> dict[int, list[EchoKernel]]:
    """Echo's compute table of every device of one nsys SQLite export (what `process_sqlite_file`
    stores as `<base>_device_<d>`). Raises sqlite3.Error for a file that is not a usable export."""
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"
    with sqlite3.connect(uri, uri=True) as conn:
        rows = conn.execute(_KERNELS).fetchall()
    nccl: dict[int, list[tuple[int, int]]] = {}
    group_size: dict[tuple[int, int, int], int] = {}
    for start, end, device, short, _ in rows:
        if short is None:
            continue
        if _is_nccl(short):
            nccl.setdefault(device, []).append((start, end))
        else:
            group_size[(device, start, end)] = group_size.get((device, start, end), 0) + 1
    tables: dict[int, list[EchoKernel]] = {}
    for start, end, device, short, demangled in rows:
        duration = end - start
        if short is None or _is_nccl(short) or demangled is None or duration <= 0:
            continue
        comms = nccl.get(device)
        ratio: float | None = None
        if comms is not None:
            one = sum(min(end, m_end) - max(start, m_start) for m_start, m_end in comms
                      if start < m_end and end > m_start)
            ratio = float(one * group_size[(device, start, end)]) / duration
        table = tables.setdefault(device, [])
        table.append(EchoKernel(len(table) + 1, short, demangled, duration, ratio))
    return tables


def echo_join(base: list[EchoKernel], dist: list[EchoKernel]) -> pd.DataFrame:
    """Echo's `calculate_slowdown` table for one device: rows in id order, dtypes as pandas reads
    Echo's SQL result (`read_sql_query`)."""
    import pandas as pd

    by_id = {k.id: k for k in dist}
    records: list[tuple[Any, ...]] = []
    for b in base:
        d = by_id.get(b.id)
        if d is None or d.demangled != b.demangled:
            continue
        slowdown: float | int | None
        if d.overlap_ratio is None:
            slowdown = None
        elif d.overlap_ratio == 0:
            slowdown = 0
        else:
            slowdown = (float(d.duration) - float(b.duration)) / (d.overlap_ratio * float(b.duration))
        records.append((b.id, b.short, b.demangled, b.duration, d.duration, d.overlap_ratio, slowdown))
    return pd.DataFrame.from_records(records, columns=ECHO_COLUMNS, coerce_float=True)


@dataclass
class EchoMatch:
    """Echo's tables per (rank, device) of the distributed exports, and what the rule dropped."""

    tables: dict[tuple[int, int], pd.DataFrame]
    compute: dict[tuple[int, int], int]       # Echo's compute kernels of each distributed device
    unmatched_devices: list[tuple[int, int]]  # devices with no baseline device of the same id

    def dropped(self) -> int:
        """Compute kernels of the distributed devices that Echo's join leaves out."""
        return sum(n - len(self.tables.get(gpu, ())) for gpu, n in self.compute.items())

    def rows(self) -> int:
        return sum(len(t) for t in self.tables.values())


def echo_match(baseline: Path, distributed: dict[Path, int]) -> EchoMatch:
    """Echo's slowdown tables of every (rank, device) of the distributed exports {path: rank}
    against the one baseline export, device id to device id as Echo joins them."""
    base = echo_tables(baseline)
    tables: dict[tuple[int, int], pd.DataFrame] = {}
    compute: dict[tuple[int, int], int] = {}
    unmatched: list[tuple[int, int]] = []
    for path, rank in distributed.items():
        for device, kernels in sorted(echo_tables(path).items()):
            compute[(rank, device)] = len(kernels)
            if device in base:
                tables[(rank, device)] = echo_join(base[device], kernels)
            else:
                unmatched.append((rank, device))
    return EchoMatch(tables, compute, unmatched)


def echo_paths(path: Path, gpus: list[tuple[int, int]]) -> dict[tuple[int, int], Path]:
    """`path` for one GPU, else `<stem>_rank<r>_device_<d><suffix>` per (rank, device)."""
    if len(gpus) == 1:
        return {gpus[0]: path}
    return {(r, d): path.with_name(f"{path.stem}_rank{r}_device_{d}{path.suffix}") for r, d in gpus}


def write_echo_tables(tables: dict[tuple[int, int], pd.DataFrame], path: Path, inputs: Iterable[Path]) -> list[Path]:
    """Write each table as Echo does (`to_excel(index=False)`), or as CSV unless `path` ends in
    .xlsx; one GPU writes `path`, several `<stem>_rank<r>_device_<d><suffix>`; each a user's output
    (hpcprof.core.output.write_spreadsheet: checked against `inputs`, formulas neutralised, whole or not at all)."""
    from hpcprof.core.output import write_spreadsheet

    inputs = list(inputs)
    return [write_spreadsheet(tables[gpu], target, inputs, what="Echo table")
            for gpu, target in echo_paths(path, sorted(tables)).items()]


def rule_line(rule: str, match: EchoMatch, hpcprof_matched: int | None = None) -> str:
    """The line every slowdown output carries: the rule that made it and what Echo's rule drops."""
    text = (f"match: {rule}; Echo's rule keeps {match.rows()} and drops {match.dropped()} of "
            f"{sum(match.compute.values())} compute kernel(s) of the distributed run")
    if hpcprof_matched is not None:
        text += f"; hpcprof's rule matches {hpcprof_matched}"
    if match.unmatched_devices:
        text += "; no baseline device for " + ", ".join(f"rank {r} device {d}" for r, d in match.unmatched_devices)
    return text


def by_rule(rule: str, hpcprof_table: pd.DataFrame, base_files: dict[Path, int], files: dict[Path, int],
            log: Callable[[str], None]) -> pd.DataFrame:
    """Collect's slowdown table under the experiment's `analysis.slowdown_match`: hpcprof's table
    (`hpcprof_table`) or Echo's tables of every (rank, device) with `rank` and `device` columns in
    front; either with a `match` column naming the rule, and the rule line logged. Echo's rule
    joins the baseline's rank-0 export (Echo has one world-size-1 export)."""
    import pandas as pd

    result = echo_match(min(base_files, key=lambda p: base_files[p]), files)
    matched = int((hpcprof_table["status"] == "matched").sum())
    log("echo: " + rule_line(RULE_ECHO if rule == "echo" else RULE_HPCPROF, result,
                             None if rule == "echo" else matched))
    if rule != "echo":
        return hpcprof_table.assign(match="hpcprof")
    parts = [t.assign(rank=r, device=d, match="echo") for (r, d), t in sorted(result.tables.items())]
    if not parts:
        return pd.DataFrame(columns=["rank", "device", *ECHO_COLUMNS, "match"])
    table = pd.concat(parts, ignore_index=True)
    return table[["rank", "device", *ECHO_COLUMNS, "match"]]
