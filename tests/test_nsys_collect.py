"""The nsys part of `hpcprof collect` (the exports of a run, each rank's tables, the cross-rank
reduce: the registry `collect` runs in its workers, run here in one process) on a run directory
holding the H200 seqpar exports."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from hpcprof.analysis.collector import CollectContext
from hpcprof.analysis.registry import collector
from hpcprof.errors import Problem

KERN_SUM_TOTALS = {0: 43_530_292, 1: 6_906_115}   # Σ Total Time of the gold cuda_gpu_kern_sum per rank


@pytest.fixture
def run_dir(fixtures_dir: Path, tmp_path: Path) -> Path:
    for rank in (0, 1):
        dst = tmp_path / f"rank{rank}.sqlite"
        shutil.copy(fixtures_dir / "nsys" / "h200_seqpar_bf16" / f"rank{rank}.sqlite", dst)
    return tmp_path


def _ctx(run_dir: Path, files: list[Path], log: list[str],
         problems: list[Problem] | None = None) -> CollectContext:
    return CollectContext(run_dir=run_dir, tool="nsys", files=files, rank_of={f: i for i, f in enumerate(files)},
                          work_dir=run_dir / "work", log=log.append,
                          problem=(problems if problems is not None else []).append)


def collect_nsys(ctx: CollectContext, nsys: str | None = None) -> dict[str, pd.DataFrame]:
    """Map every export of the run through nsys's ToolCollector in rank order, then reduce."""
    tool = collector("nsys", {"nsys": nsys} if nsys else {})
    per_file: dict[str, list[pd.DataFrame]] = {}
    for path, rank in sorted(tool.inputs(ctx).items(), key=lambda item: item[1]):
        for name, df in tool.analyse_file(path, rank).items():
            per_file.setdefault(name, []).append(df)
    out = {name: pd.concat(parts, ignore_index=True) for name, parts in per_file.items()}
    out.update(tool.reduce(out.get, ctx.log))
    return out


def _check_tables(out: dict[str, pd.DataFrame]) -> None:
    kern = out["cuda_gpu_kern_sum"]
    assert kern.groupby("rank")["Total Time (ns)"].sum().to_dict() == KERN_SUM_TOTALS
    assert {"cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "nvtx_sum", "osrt_sum", "nccl",
            "overlap", "phases"} <= set(out)
    for name in ("cuda_api_sum", "nvtx_sum", "osrt_sum"):
        assert sorted(out[name]["rank"].unique()) == [0, 1]
    nccl = out["nccl"]
    assert nccl[nccl["scope"] == "all"].set_index("collective")["count"].to_dict() == {"AllGather": 10,
                                                                                       "ReduceScatter": 10}
    assert out["overlap"]["rank"].tolist() == [0, 1]


def test_collect_sqlite_files(run_dir: Path) -> None:
    files = [run_dir / "rank0.sqlite", run_dir / "rank1.sqlite"]
    log: list[str] = []
    out = collect_nsys(_ctx(run_dir, files, log))
    _check_tables(out)
    assert all(not df.attrs for df in out.values())
    assert sorted(p.name for p in run_dir.iterdir()) == ["rank0.sqlite", "rank1.sqlite"]


def test_collect_exports_nsys_rep_with_the_site_nsys(run_dir: Path) -> None:
    """A .nsys-rep is exported with the configured nsys (here a stand-in that copies the export)."""
    (run_dir / "rank1.sqlite").rename(run_dir / "rank1.export-src")
    rep = run_dir / "rank1.nsys-rep"
    rep.write_bytes(b"not read by the stand-in")
    fake = run_dir / "fake-nsys"
    fake.write_text('#!/bin/sh\n# nsys export -t sqlite --force-overwrite true -o OUT IN\n'
                    f'[ "$1 $2 $3" = "export -t sqlite" ] || exit 3\ncp "{run_dir / "rank1.export-src"}" "$7"\n')
    fake.chmod(0o755)
    log: list[str] = []
    out = collect_nsys(_ctx(run_dir, [run_dir / "rank0.sqlite", rep], log), nsys=str(fake))
    _check_tables(out)
    assert (run_dir / "work" / "rank1.sqlite").exists()


def test_collect_without_nsys_goes_on_with_sqlite_files(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(run_dir))                  # no nsys anywhere
    rep = run_dir / "rank2.nsys-rep"
    rep.write_bytes(b"")
    log: list[str] = []
    problems: list[Problem] = []
    out = collect_nsys(_ctx(run_dir, [run_dir / "rank0.sqlite", run_dir / "rank1.sqlite", rep], log,
                            problems=problems))
    _check_tables(out)
    assert problems == [Problem(rep, problems[0].reason)] and "no nsys executable found" in problems[0].reason
