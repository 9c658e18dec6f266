"""`hpcprof nsys nccl|overlap|gaps --window auto|capture|nvtx:NAME`: by default (auto) the window collect
uses, so that on the same exports they give collect's tables (they gave the whole capture's: a 60.7 ms
set-up AllReduce outside the timed iterations among the seqpar collectives); `capture` the whole capture,
as nsys's own rules; `nvtx:NAME` the iterations a range marks. On the committed 2x H200 window campaign."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from window_campaign import ECHO_RUNS, FP32, hpcprof, run_dir

from hpcprof.tools.nsys import tables as nt

#: the collected campaign this module reads takes seconds to make (docs/developer/testing.md: Tiers)
pytestmark = pytest.mark.slow

#: command -> (its collect table, its options that collect uses)
COMMANDS = {"nccl": (nt.NCCL, []), "overlap": (nt.OVERLAP, []),
            "gaps": (nt.GAPS, ["--threshold-ms", "0.1"])}     # collect keeps gaps over 0.1 ms


@pytest.fixture(scope="module")
def workdir(window_campaign: tuple[Path, subprocess.CompletedProcess[str]]) -> Path:
    return window_campaign[0]


def analysis(workdir: Path, run: str, command: str, *options: str) -> pd.DataFrame:
    exports = sorted(str(p) for p in (run_dir(workdir, run) / "profiles" / "nsys").glob("rank*.sqlite"))
    done = hpcprof("nsys", command, *exports, *COMMANDS[command][1], *options, "--format", "csv", workdir=None)
    assert done.returncode == 0, done.stderr
    return pd.read_csv(io.StringIO(done.stdout)) if done.stdout.strip() else pd.DataFrame()


@pytest.mark.parametrize("run", [FP32[0], ECHO_RUNS[1]])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_by_default_the_commands_give_collects_tables(workdir: Path, command: str, run: str) -> None:
    collected = pd.read_parquet(run_dir(workdir, run) / "results" / f"{COMMANDS[command][0].name}.parquet")
    ours = analysis(workdir, run, command)
    if collected.empty:
        assert ours.empty
        return
    assert list(ours.columns) == list(collected.columns)
    expected = pd.read_csv(io.StringIO(collected.to_csv(index=False)))   # the same types as read back from CSV
    pd.testing.assert_frame_equal(ours, expected, check_dtype=False)


def test_capture_and_a_named_range(workdir: Path) -> None:
    """The seqpar run's timed window holds 50 all-gathers and 50 reduce-scatters per rank; the whole capture
    adds NCCL's set-up AllReduce (the capture's kernel summary has it too); nvtx:iteration marks the same
    50 iterations as collect's `timed` window."""
    auto = analysis(workdir, FP32[0], "nccl")
    capture = analysis(workdir, FP32[0], "nccl", "--window", "capture")
    assert set(auto["window"]) == {"nvtx:timed"} and "window" not in capture
    assert set(auto["collective"]) == {"AllGather", "ReduceScatter"}
    assert set(capture["collective"]) == {"AllGather", "AllReduce", "ReduceScatter"}
    kern = pd.read_parquet(run_dir(workdir, FP32[0]) / "results" / f"{nt.CUDA_GPU_KERN_SUM.name}.parquet")
    all_reduce = kern[kern["Name"].str.startswith("ncclDevKernel_AllReduce")]
    per_rank = capture[(capture["scope"] == "rank") & (capture["collective"] == "AllReduce")].set_index("rank")
    assert per_rank["total_ns"].to_dict() == all_reduce.groupby("rank")["Total Time (ns)"].sum().to_dict()
    assert per_rank.loc[0, "total_ns"] > 60e6
    named = analysis(workdir, FP32[0], "nccl", "--window", "nvtx:iteration")
    assert set(named["window"]) == {"nvtx:iteration"}
    pd.testing.assert_frame_equal(named.drop(columns="window"), auto.drop(columns="window"))


@pytest.mark.parametrize("value", ["bogus", "nvtx:", "window"])
def test_a_bad_window_is_one_line_exit_2(workdir: Path, value: str) -> None:
    exports = [str(p) for p in (run_dir(workdir, FP32[0]) / "profiles" / "nsys").glob("rank*.sqlite")]
    done = hpcprof("nsys", "overlap", *exports, "--window", value, workdir=None)
    assert done.returncode == 2 and "--window" in done.stderr and "Traceback" not in done.stderr
