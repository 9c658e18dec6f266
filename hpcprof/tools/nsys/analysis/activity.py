"""GPU activity of nsys exports as numpy columns: kernels, memory operations and CUDA API calls of
each export with the global rank of each row (load_activity), read once and shared by the
per-rank analyses (distributed.py, window.py, critical_path.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from hpcprof.analysis.clocks import clock_problem, clock_suspects
from hpcprof.analysis.nccl import nccl_name
from hpcprof.run.ranks import rank_from_filename
from hpcprof.tools.nsys.stats.arrays import codes_of, filled
from hpcprof.tools.nsys.stats.db import KERNEL, MEMCPY, MEMSET, RUNTIME, Export, NsysInputError, pid_of, process_of
from hpcprof.tools.nsys.stats.loaders import API_ACTIVITY, KERNEL_ACTIVITY, api_calls, kernels


def per_distinct(values: pd.Series | np.ndarray, fn: Callable[[object], object], dtype: type = object) -> np.ndarray:
    """`fn` of each row's value, called once per distinct value: the distinct values and the look-up
    of each row are dict operations in C (no frame, no hashing pass in pandas), as fast on one rank's
    few hundred rows as on millions. NaN rows are distinct unless they are the same object."""
    listed = values.tolist()
    found = {v: fn(v) for v in dict.fromkeys(listed)}
    if dtype is object:
        out = np.empty(len(listed), dtype=object)
        out[:] = list(map(found.__getitem__, listed))
        return out
    return np.fromiter(map(found.__getitem__, listed), dtype=dtype, count=len(listed))


def is_nccl(names: pd.Series | np.ndarray) -> np.ndarray:
    """Communication kernels: names starting with `nccl` (the nsys recipes' rule); as pandas'
    str.startswith made a mask: False for None, True for another non-text value (NaN). One test
    per distinct name."""
    return per_distinct(names, nccl_name, bool)


#: the columns of Activity.ops, in order
OPS_COLUMNS = ("start", "end", "device", "stream", "gpid", "corr", "kind", "name", "short", "pid", "file", "rank")


class Activity:
    """GPU activity of all ranks: one row per kernel or memory operation (`ops`: rank, file, pid,
    device, stream, start, end, kind, name, short, corr, gpid) and the CUDA API calls (`runtime`:
    gtid, gpid, start, end, corr, file, rank). `failed`: exports that failed while being read
    (damaged part of a file): path -> one-line reason; they are left out of every result, the
    other exports are still analysed.

    The analyses read both as numpy columns (`column`, `call`): pandas costs ~0.1 ms a column
    access or frame built, more than most analyses of one rank's few hundred operations; the
    frames are built from them when asked for (an activity given as columns), and never changed
    in place."""

    def __init__(self, ops: pd.DataFrame | None, runtime: pd.DataFrame | dict[str, np.ndarray],
                 exports: dict[Path, Export], failed: dict[Path, str] | None = None,
                 arrays: dict[str, np.ndarray] | None = None) -> None:
        if ops is None and not set(OPS_COLUMNS) <= set(arrays or {}):
            raise ValueError("an Activity needs its ops frame or all of its columns")
        self._ops, self.exports = ops, exports
        self._runtime: pd.DataFrame | None = None if isinstance(runtime, dict) else runtime
        self._calls: dict[str, np.ndarray] = dict(runtime) if isinstance(runtime, dict) else {}
        self.failed = {} if failed is None else failed
        self.arrays = dict(arrays or {})
        self.derived: dict[str, object] = {}      # results computed from these rows, kept for other analyses

    @property
    def ops(self) -> pd.DataFrame:
        """The operations as a frame (built once from the columns when the activity was given as those)."""
        if self._ops is None:
            typed = {"kind": lambda v: pd.array(v, dtype="str") if len(v) else v,    # as a frame of str scalars
                     "name": lambda v: pd.Series(v, dtype=object, copy=False),
                     "short": lambda v: pd.Series(v, dtype=object, copy=False)}
            self._ops = pd.DataFrame({c: typed[c](self.arrays[c]) if c in typed else self.arrays[c]
                                      for c in OPS_COLUMNS})
        return self._ops

    @property
    def runtime(self) -> pd.DataFrame:
        """The CUDA API calls as a frame (built once from the columns when given as those)."""
        if self._runtime is None:
            self._runtime = pd.DataFrame({c: pd.Series(v, dtype=object, copy=False) if c == "file" else v
                                          for c, v in self._calls.items()}, copy=False)
        return self._runtime

    def call(self, name: str) -> np.ndarray:
        """runtime[name] as a numpy array."""
        got = self._calls.get(name)
        if got is None:
            got = self._calls[name] = self.runtime[name].to_numpy()
        return got

    def column(self, name: str) -> np.ndarray:
        """ops[name] as a numpy array; `kernel` and `comm` (kernel rows, NCCL kernel rows) as masks."""
        got = self.arrays.get(name)
        if got is None:
            if name == "kernel":
                got = self.column("kind") == "kernel"
            elif name == "comm":
                kernel = self.column("kernel")
                got = kernel.copy()
                got[kernel] = is_nccl(self.column("short")[kernel]) | is_nccl(self.column("name")[kernel])
            else:
                got = self.ops[name].to_numpy()
            self.arrays[name] = got
        return got

    def subset(self, rows: np.ndarray, **replace: np.ndarray) -> Activity:
        """The activity of `rows` of ops (a mask), with the columns in `replace` replaced."""
        arrays = {name: self.column(name)[rows] for name in OPS_COLUMNS if name not in replace}
        arrays |= {name: values[rows] for name, values in self.arrays.items() if name not in arrays}
        return Activity(None, self._calls if self._runtime is None else self._runtime, self.exports, self.failed,
                        arrays | replace)

    @property
    def kernels(self) -> pd.DataFrame:
        """Kernel rows only."""
        return self.ops[self.column("kernel")]


def _file_ops(export: Export) -> dict[str, np.ndarray]:
    """Kernels, memcpys and memsets of one export as numpy columns (start, end, device, stream, gpid,
    corr, kind, name, short, pid)."""
    columns = ("start", "end", "device", "stream", "gpid", "corr", "kind", "name", "short")
    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}

    def add(table: dict[str, np.ndarray], kind: str, name: np.ndarray, short: np.ndarray) -> None:
        for column, source in (("start", "start"), ("end", "end"), ("device", "deviceId"), ("stream", "streamId"),
                               ("gpid", "globalPid"), ("corr", "correlationId")):
            parts[column].append(table[source])
        parts["kind"].append(filled(len(table["start"]), kind))
        parts["name"].append(name)
        parts["short"].append(short)

    common = ["start", "end", "deviceId", "streamId", "globalPid", "correlationId"]
    if not export.has(KERNEL) and (export.has_rows(MEMCPY) or export.has_rows(MEMSET)):
        raise NsysInputError(f"{export.path}: no kernel table ({KERNEL}) beside its memory operations (renamed or "
                             "dropped?): its rank would show no kernels; export the report again (nsys export -t sqlite)")
    if export.has(KERNEL):
        k = kernels(export, KERNEL_ACTIVITY)
        short = np.where(k["shortName"] >= 0, k["shortName"], k["nameId"])
        names = export.strings(np.concatenate((k["nameId"], short)))      # one look-up for both
        add(k, "kernel", names[:len(short)], names[len(short):])
    for table, label in ((MEMCPY, "memcpy"), (MEMSET, "memset")):
        if export.has(table):
            m = export.int_columns(table, common)
            same = filled(len(m["start"]), f"[CUDA {label}]")
            add(m, label, same, same)
    ops = {c: np.concatenate(parts[c]) if parts[c] else np.empty(0, dtype=object if c in ("kind", "name", "short")
                                                                  else np.int64) for c in columns}
    ops["pid"] = pid_of(ops["gpid"])
    return ops


def _file_runtime(export: Export) -> dict[str, np.ndarray]:
    if not export.has(RUNTIME):
        return {c: np.empty(0, dtype=np.int64) for c in ("gtid", "gpid", "start", "end", "corr")}
    r = api_calls(export, API_ACTIVITY)
    return {"gtid": r["globalTid"], "gpid": process_of(r["globalTid"]), "start": r["start"], "end": r["end"],
            "corr": r["correlationId"]}


def call_op_codes(act: Activity) -> tuple[np.ndarray, np.ndarray]:
    """One code per (file, process, correlation id): that of each CUDA API call of `act`, and that of
    each GPU operation (equal codes: the call launched the operation). Codes are small non-negative
    integers (below 2 × the number of rows where the correlation ids are dense), in no particular order.
    Computed once per activity (the window's NVTX projection and the critical path both use them)."""
    got = act.derived.get("call_op_codes")
    if got is None:
        got = act.derived["call_op_codes"] = _call_op_codes(act)
    return cast(tuple[np.ndarray, np.ndarray], got)


def _call_op_codes(act: Activity) -> tuple[np.ndarray, np.ndarray]:
    n = len(act.call("start"))
    files = codes_of(np.concatenate((act.call("file").astype(object, copy=False), act.column("file"))))
    gpid = codes_of(np.concatenate((act.call("gpid").astype(np.int64, copy=False), act.column("gpid"))))
    corr = np.concatenate((act.call("corr").astype(np.int64, copy=False), act.column("corr")))
    low, width = int(corr.min(initial=0)), int(corr.max(initial=0)) - int(corr.min(initial=0)) + 1
    processes = files * (int(gpid.max(initial=0)) + 1) + gpid
    span = (int(processes.max(initial=0)) + 1) * width
    if span <= 2 * len(corr) + 1024:                        # dense: the key itself
        code = processes * width + (corr - low)
    elif span < 2**62:                                      # one int64 key, made dense
        code = np.unique(processes * width + (corr - low), return_inverse=True)[1].reshape(-1)
    else:
        code = np.unique(np.stack((processes, corr), axis=1), axis=0, return_inverse=True)[1].reshape(-1)
    return code[:n], code[n:]


def launch_calls(act: Activity) -> np.ndarray:
    """For each GPU operation of `act`, the CUDA API call that launched it (its runtime row: the
    first call of the same file, process and correlation id), -1 where none did: a left join as
    one scatter over the codes, no hash join to build. Computed once per activity (the clock check,
    the critical path and the NCCL kernels' NVTX ranges use them)."""
    got = act.derived.get("launch_calls")
    if got is None:
        call_code, op_code = call_op_codes(act)
        code = np.concatenate((call_code, op_code))
        first_call = np.full(int(code.max()) + 1 if len(code) else 0, -1, dtype=np.int64)
        first_call[call_code[::-1]] = np.arange(len(call_code) - 1, -1, -1)   # the first call of each key wins
        got = act.derived["launch_calls"] = first_call[op_code]
    return cast(np.ndarray, got)


def launch_starts(act: Activity) -> np.ndarray:
    """For each GPU operation of `act`, the start of the CUDA API call that launched it (launch_calls),
    NaN when none did. Computed once per activity (the clock check and the critical path both use them)."""
    got = act.derived.get("launch_starts")
    if got is None:
        call = launch_calls(act)
        starts = act.call("start").astype(np.float64)
        got = act.derived["launch_starts"] = np.where(call >= 0, starts[np.maximum(call, 0)] if len(starts) else np.nan,
                                                      np.nan)
    return cast(np.ndarray, got)


RUNTIME_COLUMNS = ("gtid", "gpid", "start", "end", "corr", "file", "rank")


def load_activity(exports: list[Export], rank_map: dict[str, int] | None = None) -> Activity:
    """GPU activity and CUDA API calls of each export, with the global rank of each row.

    Rank: `rank_map` (by path or file name), else `rank<N>` in the file name, else
    the next free rank in input order; an export holding several GPU processes
    (e.g. torchrun under one nsys) gives one rank per process, in pid order."""
    rank_map = rank_map or {}
    parts: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = []
    taken: set[int] = set()
    pending: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = []
    failed: dict[Path, str] = {}
    for export in exports:
        try:
            ops, rt = _file_ops(export), _file_runtime(export)
        except NsysInputError as exc:
            failed[export.path] = str(exc)
            continue
        ops["file"], rt["file"] = filled(len(ops["start"]), str(export.path)), filled(len(rt["start"]), str(export.path))
        rank = rank_map.get(str(export.path), rank_map.get(export.path.name, rank_from_filename(export.path)))
        if rank is None:
            pending.append((ops, rt))
            continue
        ops["rank"] = np.full(len(ops["start"]), rank, dtype=np.int64)
        rt["rank"] = np.full(len(rt["start"]), rank, dtype=np.int64)
        taken.add(rank)
        parts.append((ops, rt))
    next_rank = 0
    for ops, rt in pending:
        pids = np.unique(ops["pid"]) if len(ops["pid"]) else np.array([0])
        for pid in pids:                           # pids sorted: one rank each, in pid order
            while next_rank in taken:
                next_rank += 1
            taken.add(next_rank)
            next_rank_of = next_rank
            ops.setdefault("rank", np.full(len(ops["pid"]), -1, dtype=np.int64))[ops["pid"] == pid] = next_rank_of
            rt.setdefault("rank", np.full(len(rt["gpid"]), -1, dtype=np.int64))[pid_of(rt["gpid"]) == pid] = \
                next_rank_of
        parts.append((ops, rt))
    if not parts:
        raise NsysInputError("; ".join(failed.values()) or "no export given")
    ops = {c: np.concatenate([p[0][c] for p in parts]) if len(parts) > 1 else parts[0][0][c] for c in OPS_COLUMNS}
    rt = {c: np.concatenate([p[1][c] for p in parts]) if len(parts) > 1 else parts[0][1][c] for c in RUNTIME_COLUMNS}
    order = np.lexsort((ops["start"], ops["rank"]))           # by rank, then start; stable
    ops = {c: v[order] for c, v in ops.items()}
    act = Activity(None, rt, {e.path: e for e in exports if e.path not in failed}, failed, ops)
    untrusted = _untrusted_clocks(act)
    if not untrusted:
        return act
    failed.update(untrusted)                                    # left out, as a damaged export is
    gone = [str(path) for path in untrusted]
    kept_ops, kept_calls = ~np.isin(ops["file"], gone), ~np.isin(rt["file"], gone)
    if not kept_ops.any():
        raise NsysInputError("; ".join(failed.values()))
    return Activity(None, {c: v[kept_calls] for c, v in rt.items()},
                    {path: e for path, e in act.exports.items() if path not in untrusted}, failed,
                    {c: v[kept_ops] for c, v in ops.items()})


def _untrusted_clocks(act: Activity) -> dict[Path, str]:
    """The exports of `act` whose times cannot be believed (clocks.clock_problem of each one's GPU
    operations, with their launches, called for those clocks.clock_suspects names): path -> why."""
    files = act.column("file")
    if not len(files):
        return {}
    launch = launch_starts(act)
    codes = codes_of(files)
    names = files[np.unique(codes, return_index=True)[1]].tolist()      # by code: first seen first
    start, end, kind = act.column("start"), act.column("end"), act.column("kind")
    paths = {str(path): path for path in act.exports}
    out = {}
    for i in np.flatnonzero(clock_suspects(codes, len(names), start, end, launch, kind)).tolist():
        mine = np.flatnonzero(codes == i)
        problem = clock_problem(start[mine], end[mine], 1.0, launch=launch[mine], kind=kind[mine])
        if problem is not None:
            out[paths[names[i]]] = f"{names[i]}: {problem}"
    return out
