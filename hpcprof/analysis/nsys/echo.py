"""Echo's slowdown flow: the world-size-1 run of a DDP sweep is the baseline of its world-size-N
runs; `echo_slowdown` computes the slowdown of every device of an N run during collect, and
`write_echo` writes Echo's table layout (CSV or .xlsx, one file per GPU: per rank and device, as
each rank usually sees its one GPU as device 0). Which run of a sweep is the baseline is decided
here (`is_baseline_for`); finding the sweep's runs is the caller's (hpcprof.collect.runs)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pandas as pd

from hpcprof.analysis.nsys.echo_match import by_rule, echo_paths
from hpcprof.ranks import rank_from_filename

ECHO_COLUMNS = ["id", "kShortName", "kDemangledName", "ground_truth", "duration", "overlap_ratio", "slowdown"]


def echo_layout(slowdown: pd.DataFrame) -> dict[tuple[int, int], pd.DataFrame]:
    """Echo's table per (rank, device): matched compute kernels in launch order, 1-based `id`,
    durations in ns."""
    matched = slowdown[slowdown["status"] == "matched"]
    out = {}
    for (rank, device), d in matched.groupby(["rank", "device"], sort=True):
        out[(int(rank), int(device))] = pd.DataFrame({
            "id": range(1, len(d) + 1),
            "kShortName": d["short"].to_numpy(),
            "kDemangledName": d["name"].to_numpy(),
            "ground_truth": d["baseline_ns"].astype("int64").to_numpy(),
            "duration": d["duration_ns"].astype("int64").to_numpy(),
            "overlap_ratio": d["overlap_ratio"].astype(float).to_numpy(),
            "slowdown": d["slowdown"].astype(float).to_numpy()})
    return out


def write_echo(slowdown: pd.DataFrame, path: Path, inputs: Iterable[Path]) -> list[Path]:
    """Write Echo's layout as CSV, or as .xlsx when `path` ends in .xlsx, each file a user's output
    (hpcprof.output.write_spreadsheet: checked against `inputs`, formulas neutralised, whole or not at all)."""
    from hpcprof.output import write_spreadsheet

    tables = echo_layout(slowdown)
    inputs = list(inputs)
    return [write_spreadsheet(tables[gpu], target, inputs, what="Echo table")
            for gpu, target in echo_paths(path, sorted(tables)).items()]


def model_key(config: dict[str, Any]) -> dict[str, Any]:
    """What makes two DDP runs the same model: the workload args without the world size."""
    args = dict(config["experiment"]["workload"].get("args") or {})
    args.pop("world_size", None)
    return args


def sqlite_exports(run_dir: Path) -> dict[Path, int]:
    """The run's nsys SQLite exports (collect's derived/ ones first) with their ranks."""
    found: dict[str, tuple[Path, int]] = {}
    for sub in ("profiles/nsys", "derived/nsys"):
        for path in sorted((run_dir / sub).glob("*.sqlite")):
            rank = rank_from_filename(path)
            if rank is not None:
                found[path.stem] = (path, rank)
    return dict(found.values())


def wants_baseline(config: dict[str, Any]) -> bool:
    """Whether a run has Echo's slowdown: a DDP run of world size > 1 under nsys."""
    exp = config["experiment"]
    return exp["workload"]["kind"] == "ddp" and exp["profile"]["tool"] == "nsys" and config["world_size"] >= 2


def is_baseline_for(config: dict[str, Any], candidate: dict[str, Any]) -> bool:
    """Whether the run of `candidate` (a config) is the baseline of the run of `config`: the same
    DDP model under nsys on world size 1."""
    return (candidate["world_size"] == 1 and candidate["experiment"]["profile"]["tool"] == "nsys"
            and model_key(candidate) == model_key(config))


def echo_slowdown(run_dir: Path, baseline_dir: Path, log: Callable[[str], None] = print,
                  rule: str = "hpcprof") -> dict[str, pd.DataFrame]:
    """{"slowdown": every device's kernels of the run in `run_dir` against its world-size-1
    baseline run in `baseline_dir`, matched by `rule` (hpcprof: name and occurrence; echo: Echo's
    analyse.py)}; {} (logged) while either has no SQLite export yet."""
    base_files, files = sqlite_exports(baseline_dir), sqlite_exports(run_dir)
    if not base_files or not files:
        missing = baseline_dir if not base_files else run_dir
        log(f"echo: no nsys SQLite export in {missing}; collect {missing.name} first (needs nsys "
            "to export .nsys-rep), then collect this run again")
        return {}
    from hpcprof.analysis.nsys import distributed as dist
    from hpcprof.analysis.nsys_stats.db import Export

    with ExitStack() as stack:
        base_exports = [stack.enter_context(Export(p)) for p in base_files]
        exports = [stack.enter_context(Export(p)) for p in files]
        table = dist.slowdown(dist.load_activity(base_exports, {}),
                              dist.load_activity(exports, {str(p): r for p, r in files.items()}))
    matched = int((table["status"] == "matched").sum())
    gpus = len(table[["rank", "device"]].drop_duplicates())
    log(f"echo: slowdown of {matched} kernel(s) on {gpus} GPU(s) against {baseline_dir.name}")

    return {"slowdown": by_rule(rule, table, base_files, files, log)}
