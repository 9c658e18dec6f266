"""% of attainable: a run's matmul TFLOP/s and bus bandwidth against what `hpcprof bench ceilings`
measured in the same job (collect's bench_ceilings), next to the % of the datasheet peak
(hpcprof.report.peaks). A datasheet peak is what no program reaches; the measured ceiling is what
cuBLAS and NCCL reach on these devices and links at that size, so 98 % of it reads as "at the
ceiling" where 52 % of NVLink's figure read as "half idle".

`attainable(metrics, ceilings, ...)` is the pure function (the findings call it); `run_attainable`
reads one run's tables for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from hpcprof.core import catalog as c
from hpcprof.report.peaks import Peaks, device_peaks, matmul_precision
from hpcprof.workloads.ceiling_specs import CollectiveSpec, GemmSpec, default_specs

if TYPE_CHECKING:
    from rich.table import Table

    from hpcprof.report.runs import RunInfo

#: a workload phase's collective in the ceilings' names
PHASE_OPS = {"allgather": "all_gather", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
             "reducescatter": "reduce_scatter", "allreduce": "all_reduce", "all_reduce": "all_reduce"}
COLUMNS = ["figure", "value", "unit", "pct_of_datasheet", "datasheet_peak", "datasheet_source",
           "pct_of_ceiling", "ceiling", "ceiling_source", "nearest_size", "ceiling_way"]
#: seqpar's phases in the order of its default ceilings (hpcprof.workloads.ceiling_specs.default_specs)
SEQPAR_GEMMS, SEQPAR_COLLECTIVES = ("matmul1", "matmul2"), ("allgather", "reduce_scatter")


def _distance(row: pd.Series, size: GemmSpec | CollectiveSpec | None) -> float:
    """How far a measured row's size is from the figure's (log ratio; 0 = the same size)."""
    if isinstance(size, GemmSpec):
        return sum(abs(math.log(float(row[d]) / getattr(size, d))) for d in ("m", "n", "k"))
    if isinstance(size, CollectiveSpec):
        return abs(math.log(float(row["bytes"]) / size.nbytes))
    return 0.0


def way_text(row: pd.Series) -> str:
    """How bench ceilings reached a collective's ceiling (its statistic's way, e.g. "NCCL's API, one CUDA
    graph of the calls"); '' for a GEMM."""
    if row["kind"] != "collective":
        return ""
    statistic = str(row["statistic"])
    return statistic[statistic.find("(") + 1:statistic.find(")")] if "(" in statistic else statistic


def _size_text(row: pd.Series) -> str:
    if row["kind"] == "gemm":
        return f"{int(row['m'])}x{int(row['n'])}x{int(row['k'])} {row['dtype']}"
    size = float(row["bytes"])
    return f"{size / 2**20:.4g} MiB {row['dtype']}" if size >= 2**20 else f"{int(size)} B {row['dtype']}"


def nearest(ceilings: pd.DataFrame, op: str, dtype: str, size: GemmSpec | CollectiveSpec | None,
            rate: str) -> pd.Series | None:
    """The measured row for a figure: same op, same dtype (a collective of another dtype where none),
    nearest in size; without a size, the best one measured."""
    rows = ceilings[(ceilings["op"] == op) & ceilings[rate].notna()]
    same = rows[rows["dtype"] == dtype]
    rows = same if not same.empty or op == "matmul" else rows
    if rows.empty:
        return None
    if size is None:
        return rows.loc[rows[rate].astype(float).idxmax()]
    return rows.loc[rows.apply(lambda r: _distance(r, size), axis=1).idxmin()]


def attainable(metrics: Mapping[str, float], ceilings: pd.DataFrame, *, precision: str = "float32",
               sizes: Mapping[str, GemmSpec | CollectiveSpec] | None = None, peaks: Peaks | None = None,
               nodes: int = 1, world_size: int = 2) -> pd.DataFrame:
    """One row per phase TFLOP/s or bus bandwidth metric (`phase.<phase>.tflops|busbw`): figure,
    value, unit, pct_of_datasheet, datasheet_peak, datasheet_source, pct_of_ceiling, ceiling,
    ceiling_source ("hpcprof bench ceilings in the same job, <date>, <device>"), nearest_size (the
    measured size it is set against), ceiling_way (how a collective's was reached: way_text). `precision`
    is the matmuls' (float32, tf32, bfloat16, float16), `sizes` each phase's own size where known, `peaks`
    the datasheet's."""
    rows = []
    sizes = sizes or {}
    for name, value in metrics.items():
        phase, rate = "", None
        for metric in (c.PHASE_TFLOPS, c.PHASE_BUSBW):
            if (parts := metric.match(name)) is not None:
                phase, rate = parts["phase"], metric
        if rate is None or value is None or not math.isfinite(float(value)):
            continue
        if rate is c.PHASE_TFLOPS:
            op, column, dtype = "matmul", "tflops", precision
            peak = peaks.tflops.get(precision) if peaks else None
            sheet = f"{peaks.gpu} {precision} dense peak: {peaks.source}" if peaks else ""
        else:
            if world_size <= 1 or phase not in PHASE_OPS:     # one rank: no traffic
                continue
            op, column, dtype = PHASE_OPS[phase], "busbw_GBps", "float32" if precision == "tf32" else precision
            peak = (peaks.nvlink_GBps if nodes == 1 else peaks.network_GBps) if peaks else None
            link = "NVLink" if nodes == 1 else "network"
            sheet = f"{peaks.gpu} {link} per direction: {peaks.source}" if peaks else ""
        found = nearest(ceilings, op, dtype, sizes.get(phase), column) if not ceilings.empty else None
        ceiling = float(found[column]) if found is not None else None
        value = float(value)
        rows.append({
            "figure": name, "value": value, "unit": rate.unit,
            "pct_of_datasheet": 100.0 * value / peak if peak else None, "datasheet_peak": peak,
            "datasheet_source": sheet,
            "pct_of_ceiling": 100.0 * value / ceiling if ceiling else None, "ceiling": ceiling,
            "ceiling_source": (f"hpcprof bench ceilings in the same job, {str(found['created'])[:10]}, "
                               f"{found['device_name']}") if found is not None else "",
            "nearest_size": _size_text(found) if found is not None else "",
            "ceiling_way": way_text(found) if found is not None else ""})
    return pd.DataFrame(rows, columns=COLUMNS)


def run_sizes(kind: str, args: dict[str, Any], world_size: int) -> dict[str, GemmSpec | CollectiveSpec]:
    """Each phase's own size where the workload says it (seqpar: its matmuls' m, n, k and its
    collectives' bytes), else none."""
    if kind != "seqpar":
        return {}
    gemms, collectives = default_specs(kind, args, world_size)
    return {**dict(zip(SEQPAR_GEMMS, gemms, strict=True)), **dict(zip(SEQPAR_COLLECTIVES, collectives, strict=True))}


def run_attainable(info: RunInfo) -> pd.DataFrame:
    """`attainable` for one collected run: its headline metrics, its bench_ceilings table, its
    workload's sizes and the datasheet peaks of the device the ceilings ran on (empty without a
    ceilings table)."""
    from hpcprof.run.results import read_table

    ceilings = read_table(info.run.path, c.BENCH_CEILINGS.name)
    if ceilings is None or ceilings.empty:
        return pd.DataFrame(columns=COLUMNS)
    record = info.record
    args = dict(record.experiment.workload.args)
    return attainable({name: value for name, value, _ in info.metrics}, ceilings,
                      precision=matmul_precision(args), sizes=run_sizes(info.kind, args, record.world_size),
                      peaks=device_peaks(str(ceilings["device_name"].iloc[0]), record.site), nodes=record.experiment.resources.nodes, world_size=record.world_size)


def pct_text(value: Any) -> str:
    return f"{value:.1f} %" if value is not None and pd.notna(value) else "-"


def terminal_table(rows: pd.DataFrame) -> Table:
    """The terminal report's table of `attainable` rows, sources in the caption."""
    from rich.table import Table

    from hpcprof.core.safe_text import rich_text

    table = Table(title="% of attainable (measured in the same job) and % of datasheet peak", title_justify="left",
                  caption="; ".join(sorted({*rows["ceiling_source"], *rows["datasheet_source"]} - {""})),
                  caption_justify="left")
    for name in ("figure", "value", "% of ceiling", "ceiling", "at size", "reached by", "% of datasheet"):
        table.add_column(name, justify="left" if name in ("figure", "at size", "reached by") else "right")
    for row in rows.itertuples():
        ceiling = f"{row.ceiling:.4g} {row.unit}" if row.ceiling is not None and pd.notna(row.ceiling) else "-"
        table.add_row(rich_text(str(row.figure)), f"{row.value:.4g} {row.unit}", pct_text(row.pct_of_ceiling),
                      ceiling, rich_text(str(row.nearest_size)), rich_text(str(row.ceiling_way)),
                      pct_text(row.pct_of_datasheet))
    return table


def points_attainable(infos: list[tuple[str, RunInfo]]) -> pd.DataFrame:
    """`run_attainable` of each (point label, first run) with a `point` column first (the HTML report)."""
    parts = [run_attainable(info).assign(point=label) for label, info in infos]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=["point", *COLUMNS])
    return pd.concat(parts, ignore_index=True)[["point", *COLUMNS]]


#: an NCCL collective as the bus bandwidth tables name it -> as the ceilings do
COLLECTIVE_OPS = {"AllGather": "all_gather", "ReduceScatter": "reduce_scatter", "AllReduce": "all_reduce"}


def collective_ceiling(ceilings: pd.DataFrame, collective: str, nbytes: float) -> pd.Series | None:
    """The ceiling row measured for an NCCL collective (as the bus bandwidth tables name it) nearest in
    size (any dtype, float32 first); None where none was measured or the size is unknown."""
    op = COLLECTIVE_OPS.get(collective)
    if op is None or ceilings.empty or not pd.notna(nbytes):
        return None
    found = nearest(ceilings, op, "float32", CollectiveSpec(op, int(nbytes), "float32"), "busbw_GBps")
    return found if found is not None and float(found["busbw_GBps"]) > 0 else None


def collective_attainable(rows: pd.DataFrame, ceilings: pd.DataFrame) -> list[str]:
    """Per bus bandwidth row (collective, bytes, busbw_gbps: nsys_busbw / torch_busbw) its % of the
    ceiling measured for the same collective nearest in size (collective_ceiling), with that size:
    `92.1 % (16 MiB)`; '' where none was measured."""
    out = []
    for collective, nbytes, busbw in zip(rows["collective"], rows["bytes"], rows["busbw_gbps"], strict=True):
        found = collective_ceiling(ceilings, str(collective), nbytes) if pd.notna(busbw) else None
        out.append(f"{100.0 * float(busbw) / float(found['busbw_GBps']):.1f} % ({float(found['bytes']) / 2**20:g} MiB)"
                   if found is not None else "")
    return out


def collective_shortfalls(busbw: pd.DataFrame, ceilings: pd.DataFrame) -> pd.DataFrame:
    """Per collective and message-size bucket of a bus bandwidth table (nsys_busbw / torch_busbw, its
    per-rank rows with a size): collective, bucket, bytes (median), time_ms (its kernels' time over the
    window, median over ranks), busbw_gbps (median over ranks), the ceiling measured for the same
    collective nearest in size (ceiling_gbps, ceiling_size) with how it was reached (ceiling_way, bench
    ceilings' statistic) and pct (100 · busbw / ceiling). Collectives no ceiling covers are left out."""
    columns = ["collective", "bucket", "bytes", "time_ms", "busbw_gbps", "ceiling_gbps", "ceiling_size", "ceiling_way",
               "pct"]
    rows = busbw[(busbw["scope"] == "rank") & busbw["bytes"].notna() & busbw["busbw_gbps"].notna()]
    out = []
    for (collective, bucket), group in rows.groupby(["collective", "bucket"], sort=False):
        nbytes = float(group["bytes"].median())
        found = collective_ceiling(ceilings, str(collective), nbytes)
        if found is None:
            continue
        value, ceiling = float(group["busbw_gbps"].median()), float(found["busbw_GBps"])
        out.append({"collective": collective, "bucket": bucket, "bytes": nbytes,
                    "time_ms": float((group["count"] * group["median_ns"]).median()) / 1e6, "busbw_gbps": value,
                    "ceiling_gbps": ceiling, "ceiling_size": _size_text(found),
                    "ceiling_way": way_text(found),
                    "pct": 100.0 * value / ceiling})
    return pd.DataFrame(out, columns=columns)
