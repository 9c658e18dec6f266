"""Echo's slowdown flow: the world-size-1 run of a DDP sweep is the baseline of its world-size-N
runs; `echo_slowdown` computes the slowdown of every device of an N run during collect, and
`write_echo` writes Echo's table layout (CSV or .xlsx, one file per GPU: per rank and device, as
each rank usually sees its one GPU as device 0). Which run of a sweep is the baseline is decided
here (`is_baseline_for`), and found among the sweep's runs (`baseline_run`); `echo_step` is the
nsys collector's run step."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from hpcprof.core.catalog import ECHO_SLOWDOWN
from hpcprof.run.ranks import rank_from_filename
from hpcprof.run.rundir import RunDir, sweep_of
from hpcprof.tools.nsys.analysis.echo_match import by_rule, echo_paths

if TYPE_CHECKING:
    from hpcprof.run.record import RunRecord

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
    (hpcprof.core.output.write_spreadsheet: checked against `inputs`, formulas neutralised, whole or not at all)."""
    from hpcprof.core.output import write_spreadsheet

    tables = echo_layout(slowdown)
    inputs = list(inputs)
    return [write_spreadsheet(tables[gpu], target, inputs, what="Echo table")
            for gpu, target in echo_paths(path, sorted(tables)).items()]


def model_key(record: RunRecord) -> dict[str, Any]:
    """What makes two DDP runs the same model: the workload args without the world size."""
    args = dict(record.experiment.workload.args)
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


def wants_baseline(record: RunRecord) -> bool:
    """Whether a run has Echo's slowdown: a DDP run of world size > 1 under nsys."""
    return record.kind == "ddp" and record.tool == "nsys" and record.world_size >= 2


def is_baseline_for(record: RunRecord, candidate: RunRecord) -> bool:
    """Whether the run of record `candidate` is the baseline of the run of `record`: the same
    DDP model under nsys on world size 1."""
    return candidate.world_size == 1 and candidate.tool == "nsys" and model_key(candidate) == model_key(record)


def baseline_run(run_dir: Path, record: RunRecord) -> Path | None:
    """The world-size-1 run of the same DDP model under nsys in the sweep of the run in `run_dir`
    (whose record is `record`), if any: Echo's baseline."""
    from hpcprof.run.record import read_record

    run = RunDir(run_dir)
    sweep = sweep_of(run.run_id)
    for other in sorted(run_dir.parent.glob(f"{sweep}*/config.json")):
        candidate = RunDir(other.parent)
        if candidate.path != run.path and sweep_of(candidate.run_id) == sweep \
                and is_baseline_for(record, read_record(candidate)):
            return candidate.path
    return None


def echo_step(run_dir: Path, record: RunRecord, log: Callable[[str], None]) -> dict[str, pd.DataFrame]:
    """Echo's flow in collect (a run step of nsys): a world-size-N DDP run against its sweep's
    world-size-1 run, matched by the experiment's `analysis.slowdown_match`; {} for any other run."""
    base = baseline_run(run_dir, record) if wants_baseline(record) else None
    if base is None:
        return {}
    return echo_slowdown(run_dir, base, log, record.experiment.analysis.slowdown_match)


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
    from hpcprof.tools.nsys.analysis import distributed as dist
    from hpcprof.tools.nsys.stats.db import Export

    with ExitStack() as stack:
        base_exports = [stack.enter_context(Export(p)) for p in base_files]
        exports = [stack.enter_context(Export(p)) for p in files]
        table = dist.slowdown(dist.load_activity(base_exports, {}),
                              dist.load_activity(exports, {str(p): r for p, r in files.items()}))
    matched = int((table["status"] == "matched").sum())
    gpus = len(table[["rank", "device"]].drop_duplicates())
    log(f"echo: slowdown of {matched} kernel(s) on {gpus} GPU(s) against {baseline_dir.name}")

    return {ECHO_SLOWDOWN.key: by_rule(rule, table, base_files, files, log)}
