"""Steps found in exports and traces that carry no marks: the marks of real
traces are stripped from a copy, and the steps found in the kernels must be the marked ones (the
same count; the boundaries within the tolerance each test states); where there is no clear period
the detection refuses and the window stays the whole capture."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcprof.analysis.categories import BUILTIN
from hpcprof.analysis.detect_steps import MIN_STEPS, WARMUP_STEPS, describe, find_steps
from hpcprof.analysis.summary import tables_of
from hpcprof.run.results import write_table
from hpcprof.tools.nsys.analysis import distributed as dist
from hpcprof.tools.nsys.analysis.collect import NsysCollector, analyse_file
from hpcprof.tools.nsys.analysis.headline import nsys_metrics
from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.torch.analysis.collect import TorchCollector
from hpcprof.tools.torch.analysis.collect import analyse_file as trace_file
from hpcprof.tools.torch.analysis.headline import torch_metrics
from hpcprof.tools.torch.analysis.load import load_trace
from hpcprof.tools.torch.analysis.window import step_iterations


def warmup(steps: int) -> int:
    """The steps of `steps` found that detection leaves out as warm-up."""
    return min(WARMUP_STEPS, steps - MIN_STEPS)


def strip_profiler_steps(source: Path, dest: Path) -> Path:
    """A copy of a Kineto trace without its ProfilerStep#N annotations."""
    with gzip.open(source, "rt") as fh:
        trace = json.load(fh)
    trace["traceEvents"] = [e for e in trace["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")]
    with gzip.open(dest, "wt") as fh:
        json.dump(trace, fh)
    return dest


@pytest.fixture(scope="module")
def stripped(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path, int], dict[str, pd.DataFrame]]:
    """trace_file of a Kineto trace without its ProfilerSteps (strip_profiler_steps), as rank `rank`:
    each (trace, rank) analysed once for the module's tests, each test given its own copies."""
    made: dict[tuple[Path, int], dict[str, pd.DataFrame]] = {}

    def tables(source: Path, rank: int) -> dict[str, pd.DataFrame]:
        if (source, rank) not in made:
            dest = tmp_path_factory.mktemp("stripped") / "trace.json.gz"
            made[source, rank] = trace_file(strip_profiler_steps(source, dest), rank)
        return {name: df.copy() for name, df in made[source, rank].items()}
    return tables


def strip_nvtx(source: Path, dest: Path) -> Path:
    """A copy of an nsys export without its NVTX ranges."""
    shutil.copyfile(source, dest)
    con = sqlite3.connect(dest)
    con.execute("DELETE FROM NVTX_EVENTS")
    con.commit()
    con.close()
    return dest


@pytest.mark.parametrize("trace, label, steps", [
    ("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "detected:optimizer", 5),
    ("nccl_parser_config/nccl_data.json.gz", "detected:optimizer", 3),
    ("h200_seqpar_bf16/rank0.pt.trace.json.gz", "detected:sequence", 3),
    ("h200_seqpar_bf16/rank1.pt.trace.json.gz", "detected:sequence", 3),
    ("h200_ddp_gpt2_bf16/rank0.pt.trace.json.gz", "detected:optimizer", 5),
    ("h200_ddp_gpt2_bf16/rank1.pt.trace.json.gz", "detected:optimizer", 5),
], ids=["resnet-sgd-5-steps", "ddp-3-steps", "seqpar-rank0", "seqpar-rank1", "gpt2-bf16-rank0", "gpt2-bf16-rank1"])
@pytest.mark.slow
def test_kineto_steps_are_the_profiler_steps(fixtures_dir: Path, stripped: Callable[[Path, int], dict[str, pd.DataFrame]],
                                            trace: str, label: str, steps: int) -> None:
    """Every ProfilerStep of the original (the last one included) is found, each within 1 µs (the
    trace's resolution; the ns-resolution trace is rounded to whole µs either way) at both ends,
    and those past the warm-up kept, numbered from the first found:
    a CNN trained with a foreach optimizer, a DDP trainer (NCCL), a loop without optimizer, a
    GPT-2 DDP trainer (bf16, fused AdamW, gradient clipping)."""
    source = fixtures_dir / "hta" / trace
    original = load_trace(source, 0, include_last_profiler_step=True)
    marked = step_iterations(original)[["start_us", "end_us"]].to_numpy() + original.origin
    tables = stripped(source, 0)
    window, found = tables["window"].iloc[0], tables["iterations"]
    skip = warmup(steps)
    assert (window["window"], window["iterations"], len(marked)) == (label, steps - skip, steps)
    assert found["iteration"].tolist() == list(range(skip, steps))
    assert np.abs(found[["start_ns", "end_ns"]].to_numpy() / 1000.0 - marked[skip:]).max() <= 1.0
    assert (found["busy_ns"] + found["idle_ns"] == found["gpu_ns"]).all()
    assert set(tables["window_kernels"]["window"]) == {label}


NSYS = [("gpu/run1/nsys/seqpar_float32_p2_rank0.sqlite", "iteration", 120),
        ("nsys/h200_campaign/seqpar_bf16_p4_rank3.sqlite", "iteration", 40),
        ("nsys/h200_seqpar_bf16/rank0.sqlite", r"step\d+", 5),
        ("gpu/h200_window_campaign/window-seqpar/20261122-234202-18a6d5-p002/profiles/nsys/rank1.sqlite", "iteration", 50),
        ("gpu/h200_window_campaign/window-seqpar-nvtx/20261122-234301-2b23fc/profiles/nsys/rank0.sqlite", "iteration", 32)]


@pytest.mark.slow
def test_gpt2_steps_agree_with_the_trainers_own_times(fixtures_dir: Path,
                                                     stripped: Callable[[Path, int], dict[str, pd.DataFrame]]) -> None:
    """The GPT-2 trainer's steps found without marks last what the trainer itself timed (from its
    batch to a CUDA synchronize: tests/fixtures/hta/h200_ddp_gpt2_bf16/steps.json) within 1 %
    (GPU time of the active steps past the warm-up left out: 41-53 ms)."""
    trainer = fixtures_dir / "hta" / "h200_ddp_gpt2_bf16"
    own = json.loads((trainer / "steps.json").read_text())
    for rank in (0, 1):
        tables = stripped(trainer / f"rank{rank}.pt.trace.json.gz", rank)
        active = own["step_ms"][rank][own["wait"] + own["warmup"]:]
        timed = np.array(active[warmup(len(active)):])
        assert np.abs(tables["iterations"]["gpu_ns"].to_numpy() / 1e6 / timed - 1).max() < 0.01


def test_torch_2_11_steps_are_counted_once(fixtures_dir: Path) -> None:
    """torch 2.11 writes each ProfilerStep twice (the CPU's annotation and the GPU row's): the
    marked window holds the 4 kept steps of 5 (the last dropped, as HTA does), not 8."""
    for rank in (0, 1):
        tables = trace_file(fixtures_dir / "hta" / "h200_ddp_gpt2_bf16" / f"rank{rank}.pt.trace.json.gz", rank)
        assert tables["window"]["window"].tolist() == ["ProfilerStep"]
        assert tables["iterations"]["iteration"].tolist() == [5, 6, 7, 8]


@pytest.mark.parametrize("export, marks, steps", NSYS, ids=["fp32-120", "bf16-p4-40-barrier", "bf16-5", "p002-50",
                                                            "truncated-32"])
def test_nsys_steps_are_the_marked_iterations(fixtures_dir: Path, tmp_path: Path, export: str, marks: str,
                                              steps: int) -> None:
    """seqpar's iterations (warm-up and timed) on H200s, found in the kernels of a copy without NVTX:
    as many as the marked iterations that hold a whole iteration's kernels (the last of a capture cut
    short holds 2 of 4, and is no step), and equal to the ns, but for the first iteration's start:
    its range also holds the GPU operations NCCL launches at its first call (memsets, memcpys before
    the first kernel, 0.15-0.3 s earlier), which the found step (from its first kernel) leaves out.
    Kernels between iterations (a barrier after the warm-up, the teardown) belong to no step; the
    first (up to WARMUP_STEPS, leaving MIN_STEPS) are left out as warm-up."""
    source = fixtures_dir / export
    with Export(source) as db:
        act = dist.load_activity([db], {str(source): 0})
        inst = dist.range_instances(act)
        kinds = pd.Series(act.column("kind"))
        op_start = act.column("start")
    marked = inst[inst["range"].astype(str).str.fullmatch(marks) & (inst["gpu_ops"] > 0)].sort_values("proj_start")
    marked = marked[marked["kernels"] == marked["kernels"].median()]
    tables = analyse_file(strip_nvtx(source, tmp_path / "rank0.sqlite"), 0)
    window, found = tables["window"].iloc[0], tables["iterations"]
    skip = warmup(steps)
    assert (window["window"], window["iterations"], len(marked)) == ("detected:sequence", steps - skip, steps)
    assert found["iteration"].tolist() == list(range(skip, steps))
    assert found["end_ns"].tolist() == marked["proj_end"].tolist()[skip:]
    assert found["start_ns"].tolist()[1:] == marked["proj_start"].tolist()[skip + 1:]
    first = marked["proj_start"].iloc[skip]
    if found["start_ns"].iloc[0] != first:          # only where NCCL's set-up opens the first range
        assert skip == 0 and found["start_ns"].iloc[0] > first and set(kinds[op_start == first]) <= {"memcpy", "memset"}


@pytest.mark.parametrize("export, reason", [
    ("nsys/fuser_report1_nsys2024.6.2.sqlite", "no repeating kernel sequence"),
    ("nsys/fuser_report1_nsys2025.1.1.sqlite", None),
    ("nsys/nsysai_mock.sqlite", "2 kernels: too few to see a period"),
    ("nsys/h200_campaign/ddp_ws1_rank0.sqlite", "backward kernels but no optimizer kernels"),
], ids=["fuser-2024", "fuser-2025", "mock", "echo-backward-pass"])
def test_nsys_refuses_without_a_clear_period(fixtures_dir: Path, export: str, reason: str | None) -> None:
    """nvFuser's test programs and nsys-ai's two-kernel mock repeat nothing; Echo's capture of one
    GPT-2 backward pass repeats its 12 layers (38 kernels each), which are no steps: each window
    stays the whole capture."""
    source = fixtures_dir / export
    tables = analyse_file(source, 0)
    assert tables["window"]["window"].tolist() == ["capture"] and tables["iterations"].empty
    if reason is not None:
        with Export(source) as db:
            act = dist.load_activity([db], {str(source): 0})
        kernel = np.flatnonzero(act.column("kernel"))
        kernel = kernel[np.lexsort((act.column("start")[kernel], act.column("corr")[kernel]))]
        assert str(find_steps(act.column("name")[kernel], BUILTIN)).startswith(reason)


@pytest.mark.slow
@pytest.mark.parametrize("trace", ["h200_ddp_gpt2/rank0.pt.trace.json.gz", "trace_filter/sampled_rank-0.json.gz"])
def test_kineto_refuses_one_or_two_steps(fixtures_dir: Path, tmp_path: Path, trace: str) -> None:
    """A GPT-2 trace of one step (its optimizer twice: the step before ends in it) and a trace of
    two steps: fewer than 3 steps alike, the window is the whole trace."""
    tables = trace_file(strip_profiler_steps(fixtures_dir / "hta" / trace, tmp_path / "t.json.gz"), 0)
    assert tables["window"]["window"].tolist() == ["capture"] and tables["iterations"].empty


def test_collect_says_how_the_window_was_found(fixtures_dir: Path, tmp_path: Path) -> None:
    """collect's line and the headline metrics of a run whose exports carry no marks."""
    parts = [analyse_file(strip_nvtx(fixtures_dir / "nsys" / "h200_seqpar_bf16" / f"rank{r}.sqlite",
                                     tmp_path / f"rank{r}.sqlite"), r) for r in (0, 1)]
    run = tmp_path / "run"
    for name in parts[0]:
        write_table(run, f"nsys_{name}", pd.concat([p[name] for p in parts], ignore_index=True))
    lines: list[str] = []
    NsysCollector().reduce(lambda name: pd.concat([p[name] for p in parts], ignore_index=True), lines.append)
    cv = max(100 * p["iterations"]["gpu_ns"].std() / p["iterations"]["gpu_ns"].mean() for p in parts)
    assert [line for line in lines if line.startswith("window:")] == [
        f"window: detected: kernel sequence period, 3 steps after 2 of warm-up, CV {cv:.1f} % (ranks 0-1)"]
    metrics = {m: v for m, v, _ in nsys_metrics(tables_of(run))}
    assert metrics["window.detected"] == 1 and metrics["window.iterations"] == 3 and metrics["window.step_cv"] > 0
    # the steps' time over the steps kept, and the window (of idle_pct, the GPU time...) theirs: past the warm-up
    found = pd.concat([p["iterations"] for p in parts])
    assert metrics["iteration.median"] == pytest.approx(found["gpu_ns"].median() / 1e6)
    window = pd.concat([p["window"] for p in parts])
    assert window["start_ns"].tolist() == found.groupby("rank")["start_ns"].min().tolist()
    assert window["end_ns"].tolist() == found.groupby("rank")["end_ns"].max().tolist() and "idle_pct" in metrics


def test_torch_headline_over_the_detected_window(fixtures_dir: Path, tmp_path: Path,
                                                 stripped: Callable[[Path, int], dict[str, pd.DataFrame]]) -> None:
    """A torch run without ProfilerSteps: GPU time by category over the found steps (the window's
    kernels), and collect's line."""
    source = fixtures_dir / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
    tables = stripped(source, 0)
    run = tmp_path / "run"
    for name, df in tables.items():
        write_table(run, f"torch_{name}", df)
    metrics = {m: v for m, v, _ in torch_metrics(tables_of(run))}
    assert metrics["window.detected"] == 1 and metrics["window.iterations"] == 3
    assert metrics["gpu.total"] == pytest.approx(tables["window_kernels"]["total_ns"].sum() / 1e6)
    assert metrics["gpu.conv"] > metrics["gpu.optimizer"] > 0 and "gpu.nccl.AllReduce" in metrics
    lines: list[str] = []
    TorchCollector().reduce(tables.get, lines.append)
    assert any(line.startswith("window: detected: optimizer kernel period, 3 steps, CV ") for line in lines)


def test_find_steps_on_kernel_names() -> None:
    """A training loop with gradient accumulation (two forward-backward passes, the optimizer once:
    one step), an evaluation step in the middle (other kernels: left out), and a loop of
    layers whose backward runs without an optimizer (refused)."""
    fwd, bwd = ["gemm_fwd", "gelu_kernel", "gemm_fwd"], ["gemm_dgrad", "GeluBackward", "gemm_wgrad"]
    opt = ["multi_tensor_apply_kernel<Adam>"] * 3
    step = fwd + bwd + fwd + bwd + opt
    evaluation = fwd * 4
    names = np.array(["init"] * 5 + step * 3 + evaluation + step * 2, dtype=object)
    found = find_steps(names, BUILTIN)
    assert not isinstance(found, str) and found.method == "optimizer"
    assert found.first == 2                         # 5 found: 2 left out as warm-up, MIN_STEPS kept
    assert (found.stops - found.starts).tolist() == [len(step)] * 3 and found.starts[0] == 5 + 2 * len(step)
    assert found.starts[1] == 5 + 3 * len(step) + len(evaluation)
    layers = np.array((fwd * 12 + bwd * 12) * 2, dtype=object)
    assert find_steps(layers, BUILTIN).startswith("backward kernels but no optimizer kernels")  # type: ignore[union-attr]
    assert describe(found.label, 5, 2.04) == "detected: optimizer kernel period, 5 steps, CV 2.0 %"
    assert describe(found.label, 30, None, 5) == "detected: optimizer kernel period, 30 steps after 5 of warm-up"
    assert describe("capture", 0) == "capture (no marks; no clear period)"


def test_a_program_that_hung_mid_step_has_no_steps() -> None:
    """The GPU run of a planted hang (benchmarks/gpu/results/forensics_gpu.txt) had 3 "steps" found, the last
    the 25 s wait in its all-reduce (CV 172.8 %): fewer than MIN_STEPS alike by span is refused; a loop with
    one slow step among alike ones is kept."""
    from hpcprof.analysis.detect_steps import MIN_STEPS, uneven

    start = np.array([0.0, 12.0, 24.0])
    hung = uneven(start, start + np.array([10.0, 10.0, 25_000.0]))
    assert hung == f"2 steps within 2x the median step's GPU span: fewer than {MIN_STEPS}"
    loop = np.arange(6) * 12.0
    assert uneven(loop, loop + np.array([10.0, 10.0, 10.0, 10.0, 10.0, 21.0])) is None
