"""Collect finished runs: workload results, a manifest of logs and profiles, and each profile
tool's analysis, into `results/` (CSV) and the campaign store. Collecting twice changes nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import pandas as pd

from hpcprof.analysis import CollectContext, collectors
from hpcprof.analysis.nsys.echo import echo_slowdown
from hpcprof.output import write
from hpcprof.rundir import RunDir
from hpcprof.store import Store

RANK_IN_NAME = re.compile(r"rank(\d+)")
MANIFEST = "manifest.csv"


def rank_of(path: Path) -> int | None:
    """The rank in a per-rank file name (`rank3.nsys-rep` -> 3)."""
    match = RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def workload_tables(results_dir: Path) -> dict[str, pd.DataFrame]:
    """Tables from the workload's JSON results: every list of records becomes one table
    (`<file>.<key>`), the scalar fields of each file one row (`<file>`)."""
    tables: dict[str, pd.DataFrame] = {}
    for path in sorted(results_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(data, dict):
            continue
        scalars = {k: v for k, v in data.items() if isinstance(v, (str, int, float, bool)) or v is None}
        if scalars:
            tables[path.stem] = pd.DataFrame([scalars])
        for key, value in data.items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                tables[f"{path.stem}.{key}"] = pd.json_normalize(value)
    return tables


def manifest(run: RunDir) -> pd.DataFrame:
    """Every log, profile and result file of the run, with rank and size."""
    rows = []
    for sub in ("logs", "profiles", "results"):
        for path in sorted((run.path / sub).rglob("*")):
            if path.is_file() and path.name != MANIFEST and not path.name.endswith(".tmp"):
                if sub == "results" and path.suffix == ".csv":
                    continue  # our own outputs
                rows.append({"kind": sub, "path": str(path.relative_to(run.path)),
                             "rank": rank_of(path), "bytes": path.stat().st_size})
    return pd.DataFrame(rows, columns=["kind", "path", "rank", "bytes"])


def collect_run(run: RunDir, store: Store, log: Callable[[str], None] = print) -> dict[str, list[str]]:
    """Collect one run; returns {source: [table names]}."""
    results_dir = run.path / "results"
    config = run.config
    done: dict[str, list[str]] = {}

    def save(source: str, tables: dict[str, pd.DataFrame]) -> None:
        for name, df in tables.items():
            write(df, results_dir / f"{source}_{name}.csv")
        store.replace_results(run.run_id, source, tables)
        done[source] = sorted(tables)

    save("workload", workload_tables(results_dir))
    save("files", {"manifest": manifest(run)})
    tool = config["experiment"]["profile"]["tool"]
    profile_dir = run.path / "profiles" / tool
    if tool != "none" and profile_dir.is_dir():
        files = sorted(p for p in profile_dir.iterdir() if p.is_file() and rank_of(p) is not None)
        if files:
            site_paths = config["site"]["paths"]
            ctx = CollectContext(run_dir=run.path, tool=tool, files=files,
                                 rank_of={p: rank_of(p) for p in files},  # type: ignore[misc]
                                 work_dir=run.path / "derived" / tool,
                                 tool_paths={"nsys": site_paths["nsys"], "ncu": site_paths["ncu"]},
                                 log=log)
            ctx.work_dir.mkdir(parents=True, exist_ok=True)
            save(tool, collectors()[tool](ctx))
        else:
            log(f"{run.run_id}: no {tool} profiles in {profile_dir}")
    save("echo", echo_slowdown(run, log))  # Echo's flow: a ws-N DDP run against its sweep's ws-1 run
    store.mark_collected(run.run_id)
    return done
