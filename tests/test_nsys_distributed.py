"""Distributed analyses on the 2-rank fixtures, with expectations checkable by hand.

H200 seqpar run (one export per rank, nsys 2025.3): each of the 5 captured steps is
all-gather -> matmul1 -> matmul2 -> reduce-scatter, every kernel on stream 7, so the NCCL
kernels never overlap the GEMMs. The per-kernel totals below are the rows of the nsys
cuda_gpu_kern_sum gold files next to the exports.
nsys-ai 2-GPU run: one export, two rank processes (pid 144 -> GPU 0, pid 145 -> GPU 1), 33
ncclDevKernel_SendRecv per GPU; 66 instances / 25,401,752 ns in nsys 2022.4's gpukernsum gold.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcprof.cli import main
from hpcprof.tools.nsys.analysis import distributed as dist
from hpcprof.tools.nsys.stats.db import Export

ALLGATHER = {0: 37_409_145, 1: 942_620}          # rank -> total ns of the 5 all-gather kernels
REDUCE_SCATTER = {0: 1_335_128, 1: 991_132}
GEMM_256x128 = {0: 2_337_298, 1: 2_417_781}      # matmul1 (H x H/2)
GEMM_192x192 = {0: 2_448_721, 1: 2_554_582}      # matmul2 (H/2 x H)


@pytest.fixture(scope="module")
def h200(fixtures_dir: Path) -> dist.Activity:
    run = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    return dist.load_activity([Export(run / "rank1.sqlite"), Export(run / "rank0.sqlite")])


@pytest.fixture(scope="module")
def sendrecv(fixtures_dir: Path) -> dist.Activity:
    return dist.load_activity([Export(fixtures_dir / "nsys" / "nsysai_mfu_2gpu_before.sqlite")])


def test_ranks_from_file_names_and_processes(h200: dist.Activity, sendrecv: dist.Activity) -> None:
    assert h200.ops.groupby("rank")["device"].unique().map(list).to_dict() == {0: [0], 1: [1]}
    assert sendrecv.ops.groupby("rank")["pid"].unique().map(list).to_dict() == {0: [144], 1: [145]}
    assert dist.parse_rank_map("a.sqlite=1, b.sqlite=0") == {"a.sqlite": 1, "b.sqlite": 0}


def test_rank_map_overrides_file_names(fixtures_dir: Path) -> None:
    run = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    act = dist.load_activity([Export(run / "rank0.sqlite"), Export(run / "rank1.sqlite")],
                             {"rank0.sqlite": 7, str(run / "rank1.sqlite"): 3})
    assert sorted(act.ops["rank"].unique()) == [3, 7]


def test_nccl_h200_allgather_and_reduce_scatter(h200: dist.Activity, fixtures_dir: Path) -> None:
    df = dist.nccl_summary(h200)
    per = df[df["scope"] == "rank"].set_index(["rank", "collective"])
    for rank in (0, 1):
        assert per.loc[(rank, "AllGather"), "count"] == 5
        assert per.loc[(rank, "ReduceScatter"), "count"] == 5
        assert per.loc[(rank, "AllGather"), "total_ns"] == ALLGATHER[rank]
        assert per.loc[(rank, "ReduceScatter"), "total_ns"] == REDUCE_SCATTER[rank]
        gold = pd.read_csv(fixtures_dir / "nsys" / "h200_seqpar_bf16" / f"rank{rank}_cuda_gpu_kern_sum.csv")
        nccl = gold[gold["Name"].str.startswith("nccl")]
        assert per.loc[rank, "total_ns"].sum() == nccl["Total Time (ns)"].sum()
        assert per.loc[rank, "max_ns"].max() == nccl["Max (ns)"].max()
    every = df[df["scope"] == "all"].set_index("collective")
    assert every.loc["AllGather", "count"] == 10
    assert every.loc["AllGather", "total_ns"] == ALLGATHER[0] + ALLGATHER[1]
    # rank 0 waited ~36.6 ms in its first all-gather for rank 1
    assert every.loc["AllGather", "slowest_rank"] == 0
    assert every.loc["AllGather", "max_ns"] == 36_624_959
    assert set(every.index) == {"AllGather", "ReduceScatter"}


def test_nccl_sendrecv_two_gpus(sendrecv: dist.Activity) -> None:
    df = dist.nccl_summary(sendrecv)
    assert set(df["collective"]) == {"SendRecv"}
    per = df[df["scope"] == "rank"].set_index("rank")
    assert per["count"].to_dict() == {0: 33, 1: 33}
    every = df[df["scope"] == "all"].iloc[0]
    assert (every["count"], every["total_ns"]) == (66, 25_401_752)
    assert (every["min_ns"], every["max_ns"]) == (89_440, 3_603_569)
    assert every["slowest_rank"] == per["total_ns"].idxmax()


def test_overlap_is_zero_on_a_single_stream(h200: dist.Activity) -> None:
    df = dist.overlap(h200).set_index("rank")
    for rank in (0, 1):
        assert df.loc[rank, "comm_ns"] == ALLGATHER[rank] + REDUCE_SCATTER[rank]
        assert df.loc[rank, "compute_ns"] == GEMM_256x128[rank] + GEMM_192x192[rank]
        assert df.loc[rank, "overlap_ns"] == 0 and df.loc[rank, "overlap_pct"] == 0.0
        busy = df.loc[rank, "span_ns"] - df.loc[rank, "idle_ns"]
        kern = h200.ops[h200.ops["rank"] == rank]
        assert busy == (kern["end"] - kern["start"]).sum()      # one stream: nothing overlaps


def test_overlap_hta_definition_on_synthetic_intervals() -> None:
    ops = pd.DataFrame({"rank": 0, "device": 0, "kind": "kernel",
                        "start": [0, 50, 200, 60], "end": [100, 150, 300, 120],
                        "name": ["gemm", "ncclDevKernel_AllReduce_Sum", "gemm", "ncclDevKernel_AllReduce_Sum"]})
    ops["short"] = ops["name"]
    row = dist.overlap(dist.Activity(ops, pd.DataFrame(), {})).iloc[0]
    # comm = [50,150) = 100; compute = [0,100) + [200,300) = 200; both = [50,100) = 50; busy 250 of span 300
    assert (row["comm_ns"], row["compute_ns"], row["overlap_ns"], row["overlap_pct"]) == (100, 200, 50, 50.0)
    assert (row["idle_ns"], row["span_ns"]) == (50, 300)


def test_gaps_add_up_to_idle_time(h200: dist.Activity) -> None:
    assert dist.gaps(h200).empty                               # nothing idle for 500 ms
    all_gaps = dist.gaps(h200, threshold_ns=0, skip_overhead=False)
    idle = dist.overlap(h200).set_index("rank")["idle_ns"]
    assert all_gaps.groupby("rank")["duration_ns"].sum().to_dict() == idle.to_dict()
    big = dist.gaps(h200, threshold_ns=1_000_000, skip_overhead=False)
    assert (big["duration_ns"] > 1_000_000).all()
    assert set(dist.gaps(h200, threshold_ns=0)["start_ns"]) <= set(all_gaps["start_ns"])


def test_phases_h200(h200: dist.Activity) -> None:
    df = dist.phases(h200).set_index(["rank", "range"])
    for rank in (0, 1):
        assert df.loc[(rank, "allgather"), "gpu_time_ns"] == ALLGATHER[rank]
        assert df.loc[(rank, "matmul1"), "gpu_time_ns"] == GEMM_256x128[rank]
        assert df.loc[(rank, "matmul2"), "gpu_time_ns"] == GEMM_192x192[rank]
        assert df.loc[(rank, "reduce_scatter"), "gpu_time_ns"] == REDUCE_SCATTER[rank]
        for phase in ("allgather", "matmul1", "matmul2", "reduce_scatter"):
            assert (df.loc[(rank, phase), "instances"], df.loc[(rank, phase), "kernels"]) == (5, 5)
        steps = df.loc[rank].loc[[f"step{i}" for i in range(5)]]
        assert steps["kernels"].tolist() == [4] * 5
        assert steps["gpu_time_ns"].sum() == (ALLGATHER[rank] + REDUCE_SCATTER[rank] + GEMM_256x128[rank]
                                              + GEMM_192x192[rank])


def test_slowdown_against_itself_is_zero(h200: dist.Activity, fixtures_dir: Path) -> None:
    base = dist.load_activity([Export(fixtures_dir / "nsys" / "h200_seqpar_bf16" / "rank0.sqlite")])
    df = dist.slowdown(base, h200)
    assert set(df["status"]) == {"matched"}
    assert len(df) == 20                                       # 2 GEMMs x 5 steps x 2 ranks
    assert (df["slowdown"] == 0).all()                         # no NCCL overlap on one stream
    r0 = df[df["rank"] == 0]
    assert (r0["duration_ns"] == r0["baseline_ns"]).all()
    r1 = df[df["rank"] == 1]
    assert r1["duration_ns"].sum() == GEMM_256x128[1] + GEMM_192x192[1]
    assert r1["baseline_ns"].sum() == GEMM_256x128[0] + GEMM_192x192[0]


def test_slowdown_formula_and_unmatched_kernels() -> None:
    def activity(rows: list[tuple[str, int, int]]) -> dist.Activity:
        ops = pd.DataFrame(rows, columns=["name", "start", "end"]).assign(rank=0, device=0, kind="kernel")
        ops["short"] = ops["name"]
        return dist.Activity(ops, pd.DataFrame(), {})

    base = activity([("gemm", 0, 100), ("gemm", 200, 300), ("only_base", 400, 410)])
    # gemm #0 runs 150 ns, 50 of them under an NCCL kernel: ratio 1/3, slowdown (150-100)/(1/3*100) = 1.5
    # gemm #1: no overlap -> 0; the k-th gemm is matched with the k-th gemm whatever else ran between
    distributed = activity([("gemm", 0, 150), ("ncclDevKernel_AllReduce", 100, 180), ("extra", 180, 190),
                            ("gemm", 200, 310)])
    df = dist.slowdown(base, distributed).set_index(["name", "occurrence"])
    assert df.loc[("gemm", 0), "overlap_ratio"] == pytest.approx(1 / 3)
    assert df.loc[("gemm", 0), "slowdown"] == pytest.approx(1.5)
    assert df.loc[("gemm", 1), "slowdown"] == 0
    assert df.loc[("extra", 0), "status"] == "distributed only"
    assert df.loc[("only_base", 0), "status"] == "baseline only"
    assert np.isnan(df.loc[("extra", 0), "slowdown"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 15)), min_size=0, max_size=12),
       st.lists(st.tuples(st.integers(0, 60), st.integers(1, 15)), min_size=0, max_size=12))
def test_interval_sweeps_match_brute_force(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    def cells(iv: list[tuple[int, int]]) -> set[int]:
        return {t for s, d in iv for t in range(s, s + d)}

    sa, ea = np.array([s for s, _ in a], dtype=np.int64), np.array([s + d for s, d in a], dtype=np.int64)
    sb, eb = np.array([s for s, _ in b], dtype=np.int64), np.array([s + d for s, d in b], dtype=np.int64)
    ua, ub = dist.merge_intervals(sa, ea), dist.merge_intervals(sb, eb)
    assert dist.covered(sa, ea) == len(cells(a))
    assert dist.intersection(ua, ub) == len(cells(a) & cells(b))
    per = dist.covered_within(ub, sa, ea)
    assert per.tolist() == [len(cells([iv]) & cells(b)) for iv in a]


@pytest.mark.parametrize("command", ["nccl", "overlap", "gaps", "phases"])
def test_cli_analyses(fixtures_dir: Path, command: str) -> None:
    run = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    res = CliRunner().invoke(main, ["nsys", command, str(run / "rank0.sqlite"), str(run / "rank1.sqlite"),
                                    "--format", "csv"])
    assert res.exit_code == 0, res.output
    header = res.stdout.splitlines()[0]
    assert header.startswith("scope,rank" if command == "nccl" else "rank,")
    for fmt in ("json", "table"):
        assert CliRunner().invoke(main, ["nsys", command, str(run / "rank0.sqlite"), "--format", fmt]).exit_code == 0


def test_cli_slowdown_lists_every_device(fixtures_dir: Path, tmp_path: Path) -> None:
    run = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    out = tmp_path / "slowdown.csv"
    res = CliRunner().invoke(main, ["nsys", "slowdown", "--baseline", str(run / "rank0.sqlite"),
                                    "--distributed", str(run / "rank0.sqlite"), "--distributed",
                                    str(run / "rank1.sqlite"), "--format", "csv", "--output", str(out)])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(out)
    assert sorted(df["device"].unique()) == [0, 1] and (df["status"] == "matched").all()


def test_phases_match_nsys_nvtx_gpu_proj_sum(gpu_data: Path) -> None:
    """Projected GPU time, GPU op count and range time per NVTX range equal nsys 2025.3.1's
    nvtx_gpu_proj_sum on the GPT-2 DDP exports in benchmarks/gpu."""
    run = gpu_data / "run3" / "nsys"
    checked = 0
    for gold_path in sorted(run.glob("*_nvtx_gpu_proj_sum.csv")):
        db = run / gold_path.name.replace("_nvtx_gpu_proj_sum.csv", ".sqlite")
        ours = dist.phases(dist.load_activity([Export(db)])).set_index("range")
        gold = pd.read_csv(gold_path)
        for row in gold.to_dict("records"):
            mine = ours.loc[row["Range"].removeprefix(":")]   # hpcprof names the default domain's ranges plainly
            assert (mine["proj_time_ns"], mine["gpu_ops"], mine["range_time_ns"], mine["instances"]) == (
                row["Total Proj Time (ns)"], row["Total GPU Ops"], row["Total Range Time (ns)"],
                row["Range Instances"]), (gold_path.name, row["Range"])
            checked += 1
    assert checked == 29


@pytest.mark.slow
@pytest.mark.parametrize("command", ["nccl", "overlap", "gaps", "phases"])
def test_cross_rank_commands_one_file_at_a_time_equal_all_at_once(command: str, fixtures_dir: Path,
                                                                  tmp_path: Path) -> None:
    """Files named by rank are analysed one at a time; files without a rank in their name all at
    once (ranks from the processes inside). Both give the same table; 64 rank files, more than
    the open files allowed below, are analysed under a limit of 48 open files."""
    import shutil
    import subprocess
    import sys

    run = fixtures_dir / "nsys" / "h200_seqpar_bf16"
    unnamed = [shutil.copy(run / f"rank{r}.sqlite", tmp_path / f"{'ab'[r]}.sqlite") for r in (0, 1)]
    extra = ["--threshold-ms", "0.1"] if command == "gaps" else []
    all_at_once = CliRunner().invoke(main, ["nsys", command, "--format", "csv", *extra, *map(str, unnamed)])
    per_file = CliRunner().invoke(main, ["nsys", command, "--format", "csv", *extra,
                                         str(run / "rank1.sqlite"), str(run / "rank0.sqlite")])
    assert all_at_once.exit_code == 0 and per_file.exit_code == 0, per_file.stderr
    assert per_file.stdout == all_at_once.stdout.replace(str(tmp_path / "a.sqlite"), str(run / "rank0.sqlite")) \
        .replace(str(tmp_path / "b.sqlite"), str(run / "rank1.sqlite"))
    assert len(per_file.stdout.splitlines()) >= 2    # a header and rows

    many = tmp_path / "many"
    many.mkdir()
    for rank in range(64):
        (many / f"rank{rank}.sqlite").hardlink_to(run / f"rank{rank % 2}.sqlite")
    limited = subprocess.run(
        [sys.executable, "-c", "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48)); "
         "from hpcprof.cli import main; main(sys.argv[1:])", "nsys", command, "--format", "csv", *extra,
         *(str(many / f"rank{rank}.sqlite") for rank in range(64))],
        capture_output=True, text=True, timeout=300)
    assert limited.returncode == 0, limited.stderr[-2000:]
    rank_column = 1 if command == "nccl" else 0
    ranks = {line.split(",")[rank_column] for line in limited.stdout.splitlines()[1:]}
    assert ranks - {""} == ({str(r) for r in range(64)} if command != "gaps" else {str(r) for r in range(1, 64, 2)})
