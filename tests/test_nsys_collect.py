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


def _all_rows(nccl: pd.DataFrame) -> pd.DataFrame:
    columns = ["collective", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "slowest_rank", "slowest_total_ns"]
    return nccl[nccl["scope"] == "all"][columns].reset_index(drop=True)


def test_nccl_across_ranks_is_one_reduction_for_the_cli_and_collect(run_dir: Path) -> None:
    """`hpcprof nsys nccl` (file by file through collect's engine) and collect's nsys_nccl table
    reduce the same per-rank rows with the one function: equal rows across ranks, even where the
    old collect rounding (Python's round) and the CLI's (pandas) differed in the last digit."""
    from hpcprof.analysis.nsys import distributed as dist
    from hpcprof.analysis.nsys.cli import _analyse_one_at_a_time
    from hpcprof.analysis.nsys.collect import NsysCollector

    files = (run_dir / "rank0.sqlite", run_dir / "rank1.sqlite")
    cli, failures = _analyse_one_at_a_time(files, [0, 1], dist.nccl_per_rank, dist.nccl_across_ranks)
    assert failures == 0 and cli is not None
    per = cli[cli["scope"] == "rank"].copy()
    per.insert(2, "window", "capture")                           # collect's per-rank rows carry their window
    collected = NsysCollector().reduce({"nccl": per}.get, print)["nccl"]
    pd.testing.assert_frame_equal(_all_rows(collected), _all_rows(cli))
    assert set(collected.loc[collected["scope"] == "all", "window"]) == {"capture"}
    assert _all_rows(cli)["count"].tolist() == [10, 10]         # AllGather, ReduceScatter: 5 per rank

    # 43,530,002 ns over 40 calls = 1,088,250.05 ns: half to even gives 1,088,250.0 (Python's
    # round of the float gave 1,088,250.1 in the old collect reduce, the CLI 1,088,250.0)
    crafted = pd.DataFrame({"scope": "rank", "rank": [0, 1], "window": "timed", "collective": "AllReduce",
                            "count": [20, 20], "total_ns": [20_000_001, 23_530_001], "mean_ns": [1e6, 1176500.0],
                            "min_ns": [1, 2], "max_ns": [3, 4]})
    collected = _all_rows(NsysCollector().reduce({"nccl": crafted}.get, print)["nccl"])
    from_cli = _all_rows(dist.nccl_across_ranks(crafted.drop(columns="window")))
    pd.testing.assert_frame_equal(collected, from_cli)
    assert collected.loc[0, "mean_ns"] == 1_088_250.0 and collected.loc[0, "slowest_rank"] == 1
