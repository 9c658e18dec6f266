"""nsys profiles in `hpcprof collect`: the exports of a run, one rank's tables, the cross-rank reduce."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pandas as pd

from hpcprof.analysis import CollectContext
from hpcprof.analysis.nsys import critical_path
from hpcprof.analysis.nsys import distributed as dist
from hpcprof.analysis.nsys.db import Export
from hpcprof.analysis.nsys.stats import SUMMARY_REPORTS, MissingData, run_report
from hpcprof.analysis.nsys.timeline import iteration_timeline


def find_nsys(ctx: CollectContext) -> str | None:
    """The site's nsys (tool_paths["nsys"]) or nsys on PATH, if any."""
    configured = ctx.tool_paths.get("nsys")
    if configured and Path(configured).exists():
        return configured
    return shutil.which(configured or "nsys")


def export_sqlite(nsys: str, rep: Path, work_dir: Path) -> Path:
    """`nsys export -t sqlite` of `rep` into `work_dir` (reused when already exported)."""
    out = work_dir / (rep.stem + ".sqlite")
    if out.exists() and out.stat().st_mtime >= rep.stat().st_mtime:
        return out
    work_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([nsys, "export", "-t", "sqlite", "--force-overwrite", "true", "-o", str(out), str(rep)],
                   check=True, capture_output=True, text=True)
    return out


def sqlite_files(ctx: CollectContext) -> dict[Path, int]:
    """The run's exports with their ranks: .sqlite files as given, .nsys-rep exported when nsys exists."""
    reps = [f for f in ctx.files if f.suffix == ".nsys-rep"]
    given = {f: ctx.rank_of.get(f) for f in ctx.files if f.suffix == ".sqlite"}
    have = {f.stem for f in given}
    nsys = find_nsys(ctx) if any(r.stem not in have for r in reps) else None
    for rep in reps:
        if rep.stem in have:
            continue
        if nsys is None:
            ctx.log(f"nsys: no nsys executable found; skipping {rep.name} (export it with "
                    "`nsys export -t sqlite`), using the .sqlite files present")
            break
        try:
            given[export_sqlite(nsys, rep, ctx.work_dir)] = ctx.rank_of.get(rep)
        except subprocess.CalledProcessError as exc:
            ctx.log(f"nsys: export of {rep} failed: {(exc.stderr or '').strip().splitlines()[-1:] or exc}")
    return {f: (r if r is not None else -1) for f, r in given.items()}


#: GPU idle gaps reported by collect (the report's gaps plot): longer than 0.1 ms
GAP_NS = 100_000


def analyse_file(path: Path, rank: int) -> dict[str, pd.DataFrame]:
    """One rank's export: its summary reports, NCCL per collective, overlap, NVTX phases,
    iteration timeline and GPU idle gaps over GAP_NS, each with a `rank` column. NsysInputError when it cannot be used."""
    out: dict[str, pd.DataFrame] = {}
    with Export(path) as export:
        export.check_usable()
        activity = dist.load_activity([export], {str(path): rank})
        for name in SUMMARY_REPORTS:
            try:
                df = run_report(export, name)
            except MissingData:
                continue
            df.insert(0, "rank", rank)
            out[name] = df
        nccl = dist.nccl_summary(activity)
        out["nccl"] = nccl[nccl["scope"] == "rank"].reset_index(drop=True)
        out["overlap"] = dist.overlap(activity)
        out["phases"] = dist.phases(activity)
        out["timeline"] = iteration_timeline(activity)
        out["gaps"] = dist.gaps(activity, GAP_NS)
        out[critical_path.EVENTS_TABLE] = critical_path.rank_events(activity)
    for df in out.values():
        df.attrs.clear()
    return out


def reduce_ranks(read: Callable[[str], pd.DataFrame | None]) -> dict[str, pd.DataFrame]:
    """Cross-rank rows from the per-rank tables: per collective, the totals over all ranks and the
    slowest rank (`scope == "all"`), appended to the per-rank NCCL rows."""
    paths = critical_path.collect_tables(read)
    per = read("nccl")
    if per is None or per.empty:
        return paths
    per = per[per["scope"] == "rank"]
    rows = []
    for coll, g in per.groupby("collective", sort=True):
        slow = g.loc[g["total_ns"].idxmax()]
        total, count = int(g["total_ns"].sum()), int(g["count"].sum())
        rows.append({"scope": "all", "rank": pd.NA, "collective": coll, "count": count, "total_ns": total,
                     "mean_ns": round(total / count, 1), "min_ns": int(g["min_ns"].min()),
                     "max_ns": int(g["max_ns"].max()), "slowest_rank": int(slow["rank"]),
                     "slowest_total_ns": int(slow["total_ns"])})
    out = pd.concat([per, pd.DataFrame(rows)], ignore_index=True)
    for c in ("rank", "slowest_rank", "slowest_total_ns"):
        out[c] = out[c].astype("Int64")
    return {"nccl": out, **paths}
