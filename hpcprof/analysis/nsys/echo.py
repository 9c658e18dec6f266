"""Echo's slowdown flow: the world-size-1 run of a DDP sweep is the baseline of its world-size-N
runs; `echo_slowdown` computes the slowdown of every device of an N run during collect, and
`write_echo` writes Echo's table layout (CSV or .xlsx, one file per GPU: per rank and device, as
each rank usually sees its one GPU as device 0)."""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from hpcprof.rundir import RunDir, sweep_of

ECHO_COLUMNS = ["id", "kShortName", "kDemangledName", "ground_truth", "duration", "overlap_ratio", "slowdown"]
RANK = re.compile(r"rank(\d+)")


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


def echo_paths(path: Path, gpus: list[tuple[int, int]]) -> dict[tuple[int, int], Path]:
    """`path` for one GPU, else `<stem>_rank<r>_device_<d><suffix>` per (rank, device)."""
    if len(gpus) == 1:
        return {gpus[0]: path}
    return {(r, d): path.with_name(f"{path.stem}_rank{r}_device_{d}{path.suffix}") for r, d in gpus}


def write_echo(slowdown: pd.DataFrame, path: Path) -> list[Path]:
    """Write Echo's layout as CSV, or as .xlsx when `path` ends in .xlsx (via temp files + rename)."""
    tables = echo_layout(slowdown)
    written = []
    path.parent.mkdir(parents=True, exist_ok=True)
    for gpu, target in echo_paths(path, sorted(tables)).items():
        tmp = target.with_name(target.name + ".tmp")
        if target.suffix == ".xlsx":
            tables[gpu].to_excel(tmp, index=False, engine="openpyxl")
        else:
            tables[gpu].to_csv(tmp, index=False)
        written.append(tmp)
    return [tmp.replace(tmp.with_name(tmp.name[:-4])) for tmp in written]


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
            match = RANK.search(path.name)
            if match:
                found[path.stem] = (path, int(match.group(1)))
    return dict(found.values())


def baseline_run(run: RunDir) -> RunDir | None:
    """The world-size-1 run of the same DDP model under nsys in `run`'s sweep, if any."""
    sweep = sweep_of(run.run_id)
    key = model_key(run.config)
    for other in sorted(run.path.parent.glob(f"{sweep}*/config.json")):
        cand = RunDir(other.parent)
        if cand.path == run.path or sweep_of(cand.run_id) != sweep:
            continue
        cfg = cand.config
        if cfg["world_size"] == 1 and cfg["experiment"]["profile"]["tool"] == "nsys" and model_key(cfg) == key:
            return cand
    return None


def echo_slowdown(run: RunDir, log: Callable[[str], None] = print) -> dict[str, pd.DataFrame]:
    """{"slowdown": every device's kernels against the sweep's world-size-1 run} for a DDP run of
    world size > 1 under nsys; {} for any other run."""
    config = run.config
    exp = config["experiment"]
    if exp["workload"]["kind"] != "ddp" or exp["profile"]["tool"] != "nsys" or config["world_size"] < 2:
        return {}
    base = baseline_run(run)
    if base is None:
        return {}
    base_files, files = sqlite_exports(base.path), sqlite_exports(run.path)
    if not base_files or not files:
        missing = base if not base_files else run
        log(f"echo: no nsys SQLite export in {missing.path}; collect {missing.run_id} first (needs nsys "
            "to export .nsys-rep), then collect this run again")
        return {}
    from hpcprof.analysis.nsys import distributed as dist
    from hpcprof.analysis.nsys.db import Export

    with ExitStack() as stack:
        base_exports = [stack.enter_context(Export(p)) for p in base_files]
        exports = [stack.enter_context(Export(p)) for p in files]
        table = dist.slowdown(dist.load_activity(base_exports, {}),
                              dist.load_activity(exports, {str(p): r for p, r in files.items()}))
    matched = int((table["status"] == "matched").sum())
    gpus = len(table[["rank", "device"]].drop_duplicates())
    log(f"echo: slowdown of {matched} kernel(s) on {gpus} GPU(s) against {base.run_id}")
    from hpcprof.analysis.nsys.echo_match import by_rule

    rule = (exp.get("analysis") or {}).get("slowdown_match", "hpcprof")
    return {"slowdown": by_rule(rule, table, base_files, files, log)}
