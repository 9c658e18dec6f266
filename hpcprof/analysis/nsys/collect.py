"""Collector for nsys profiles of a run (see hpcprof.analysis.CollectContext)."""

from __future__ import annotations

import shutil
import subprocess
from contextlib import ExitStack
from pathlib import Path

import pandas as pd

from hpcprof.analysis import CollectContext
from hpcprof.analysis.nsys import distributed as dist
from hpcprof.analysis.nsys.db import Export, NsysInputError
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


def collect_nsys(ctx: CollectContext) -> dict[str, pd.DataFrame]:
    """Per-rank summary reports (with a `rank` column) and the NCCL, overlap and phase tables."""
    files = sqlite_files(ctx)
    out: dict[str, pd.DataFrame] = {}
    with ExitStack() as stack:
        exports, ranks = [], {}
        for path, rank in sorted(files.items(), key=lambda item: (item[1], str(item[0]))):
            try:
                export = stack.enter_context(Export(path))
                export.check_usable()
            except NsysInputError as exc:
                ctx.log(f"nsys: skipped: {exc}")
                continue
            exports.append(export)
            if rank >= 0:
                ranks[str(path)] = rank
        if not exports:
            ctx.log("nsys: no usable export")
            return out
        activity = dist.load_activity(exports, ranks)
        file_rank = activity.ops.groupby("file")["rank"].min().to_dict()
        for name in SUMMARY_REPORTS:
            parts = []
            for export in exports:
                try:
                    df = run_report(export, name)
                except MissingData:
                    continue
                df.insert(0, "rank", int(file_rank.get(str(export.path), -1)))
                parts.append(df)
            if parts:
                out[name] = pd.concat(parts, ignore_index=True)
        out["nccl"] = dist.nccl_summary(activity)
        out["overlap"] = dist.overlap(activity)
        out["phases"] = dist.phases(activity)
        out["timeline"] = iteration_timeline(activity)
    for df in out.values():
        df.attrs.clear()
    ctx.log(f"nsys: {len(exports)} export(s) analysed: {', '.join(sorted(out))}")
    return out
