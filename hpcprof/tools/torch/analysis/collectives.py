"""The collectives of a Kineto trace with their sizes, for the bus bandwidth table (hpcprof.analysis.busbw).

PyTorch's `record_param_comms` records each collective's `Collective name`, `In msg nelems`, `Out
msg nelems`, `dtype`, `Group size` and process group (`Process Group Name`, `Process Group Ranks`);
PyTorch 2.x copies them onto the NCCL kernel it launched, older ones leave them on the cpu_op, linked
to the kernel by `External id` (TraceLens' NcclAnalyser reads the kernel's). One instance per `nccl*`
kernel: its bytes (nelems × the dtype's bytes; AllGather's output, every other collective's input:
nccl-tests' size), its start and end in exact ns. Barriers (a 0-byte all-reduce) are left out.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from hpcprof.analysis import busbw
from hpcprof.analysis.nccl import collective_kind
from hpcprof.tools.torch.analysis.critical_path import _ns
from hpcprof.tools.torch.analysis.load import Gatherer
from hpcprof.tools.torch.analysis.schema import Event

#: a collective's sizes as recorded: (collective name, in nelems, out nelems, dtype, group size, group)
Sizes = tuple[Any, Any, Any, Any, Any, str | None]
PART = tuple[list[tuple[Any, ...]], dict[int, Sizes]]


def _sizes(args: Any) -> Sizes:
    group = None if args.group is None else f"{args.group} {args.members or ''}".strip()
    return args.collective, args.in_nelems, args.out_nelems, args.dtype, args.group_size, group


def batch_collectives(events: list[Event]) -> PART:
    """One batch's NCCL kernels (name, start ns, end ns, External id, their sizes or None) and
    record_param_comms' sizes by External id."""
    kernels: list[tuple[Any, ...]] = []
    params: dict[int, Sizes] = {}
    for e in events:
        a = e.args
        if a is None or e.ts is None or e.dur is None or math.isnan(e.dur):
            continue
        if e.cat == "kernel" and isinstance(e.name, str) and e.name.startswith("nccl"):
            kernels.append((e.name, _ns(e.ts), _ns(e.ts + e.dur), a.external,
                            _sizes(a) if a.collective is not None else None))
        elif e.cat == "cpu_op" and e.name == "record_param_comms" and a.external is not None:
            params[a.external] = _sizes(a)
    return kernels, params


class TraceCollectives(Gatherer):
    """The NCCL kernels and record_param_comms of one trace, gathered batch by batch (a Gatherer)."""

    part = staticmethod(batch_collectives)

    def reset(self) -> None:
        self.kernels: list[tuple[Any, ...]] = []
        self.params: dict[int, Sizes] = {}

    def merge(self, part: PART) -> None:
        kernels, params = part
        self.kernels += kernels
        self.params.update(params)

    def instances(self, rank: int) -> pd.DataFrame:
        """One row per NCCL kernel (busbw.INSTANCE_COLUMNS); bytes NaN where neither the kernel nor
        its record_param_comms carries sizes; barriers left out."""
        rows: list[tuple[Any, ...]] = []
        for name, start, end, external, sizes in self.kernels:
            sizes = sizes or self.params.get(external)
            if sizes is None:
                kind = busbw.collective_type(collective_kind(name))
                rows.append((rank, None, None, kind or "other", None, math.nan, start, end))
                continue
            coll, n_in, n_out, dtype, size, group = sizes
            kind = busbw.collective_type(coll) or busbw.collective_type(collective_kind(name)) or str(coll)
            if kind == "Barrier":
                continue
            width = busbw.DTYPE_BYTES.get(str(dtype))
            nelems = n_out if kind == "AllGather" else n_in
            nbytes = float(nelems) * width if width is not None and isinstance(nelems, int | float) else math.nan
            rows.append((rank, group, size if isinstance(size, int) else None, kind, dtype, nbytes, start, end))
        return pd.DataFrame(rows, columns=busbw.INSTANCE_COLUMNS)


def busbw_table(collectives: TraceCollectives, rank: int, window: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The rank's rows of torch_busbw: its collectives inside the measured window (trace_window's
    row: start_ns, end_ns on the trace's clock) per process group, collective and size bucket."""
    row = window.iloc[0]
    inst = busbw.in_window(collectives.instances(rank), row["start_ns"], row["end_ns"])
    missing = int(inst["bytes"].isna().sum())
    note = (f"{busbw.SIZES_UNKNOWN}: {missing} NCCL kernels of {path.name} carry no record_param_comms sizes "
            "(Collective name, In msg nelems: their launch is not in the trace, or PyTorch recorded none)") \
        if missing else ""
    return busbw.rank_table(inst, {rank: str(row["window"])}, {rank: note})


def _file_busbw(path: Path, helpers: int) -> pd.DataFrame | str:
    """One trace's busbw rows (busbw_table in its measured window, as collect makes them), or the
    line saying why it could not be used."""
    from hpcprof.tools.torch.analysis.load import TraceColumns, TraceError, gather
    from hpcprof.tools.torch.analysis.window import trace_window

    columns, collectives = TraceColumns(), TraceCollectives()
    try:
        rank = gather(path, columns, collectives, helpers=helpers)
        trace = columns.trace(path, rank)
    except (TraceError, OSError) as exc:
        return f"{path}: {exc}"
    return busbw_table(collectives, trace.rank, trace_window(trace)[0], path)


def busbw_of_files(paths: list[Path], workers: int | None = None) -> tuple[pd.DataFrame | None, list[str]]:
    """`hpcprof trace nccl`'s table: the busbw rows of each trace (one per rank) and the rows across
    ranks (busbw.across_ranks), collect's torch_busbw computed the same way; None where no trace
    could be used, and one line per trace that could not."""
    from hpcprof.tools.torch.analysis.load import map_traces

    parts, errors = [], []
    for result in map_traces(_file_busbw, paths, workers):
        if isinstance(result, str):
            errors.append(result)
        else:
            parts.append(result)
    if not parts:
        return None, errors
    return busbw.across_ranks(pd.concat(parts, ignore_index=True)), errors
