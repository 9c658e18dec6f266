"""The result tables and metrics declared once (hpcprof.core.catalog): the committed reference page is
the one the declarations generate, and what the real `collect` makes of real fixture runs (nsys,
torch.profiler and ncu profiles of seqpar and DDP runs on H200s, Echo's slowdown) is all declared,
with the declared units, so the declarations cannot drift from the code. `idle_pct` is one formula
wherever it is computed: over the measured window, the whole capture and each iteration."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from hpcprof_cli import hpcprof
from test_report_html import gpu_run

from hpcprof.core import catalog as c
from hpcprof.profilers import catalogs
from hpcprof.run.record import read_record
from hpcprof.run.results import list_tables, read_headline, read_table
from hpcprof.run.rundir import RunDir
from hpcprof.tools.nsys import tables as nt
from hpcprof.tools.nsys.stats.stats import SUMMARY_REPORTS
from hpcprof.tools.torch import tables as tt

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "reference" / "metrics.md"
DDP, TORCH_RUN, SEQPAR, NCU_RUN = "20261121-000000-ec40ec", "20261121-000001-70c470", "20261121-000002-5e9a00", \
    "20261121-000003-9c0000"


def test_the_committed_reference_page_is_the_generated_one() -> None:
    assert PAGE.read_text() == c.metrics_page(catalogs()), \
        "docs/reference/metrics.md is stale: run python docs/generate.py"


def test_every_name_is_declared_once() -> None:
    tables = [t.name for t in c.every_table(catalogs())]
    assert len(tables) == len(set(tables))
    headline = [m.name for m in c.METRICS if m.headline]
    assert len(headline) == len(set(headline))
    assert {t.name for t in nt.SUMMARIES} == {c.table_name(nt.NSYS, r) for r in SUMMARY_REPORTS}
    assert all(m.window in c.WINDOWS for m in c.METRICS) and all(t.window in c.WINDOWS for t in c.every_table(catalogs()))
    assert c.PHASE_TIME.match("phase.reduce_scatter.time") == {"phase": "reduce_scatter"}
    assert c.GPU_TIME[1].match("gpu.nccl.AllGather") == {"category": "nccl.AllGather"}
    assert c.GPU_TIME[1].match("gpu.nccl.AllGather.share") is None and c.declared("gpu.total") is c.GPU_TIME[0]


def test_each_tool_declares_its_tables_and_their_part_in_the_metrics() -> None:
    """A built-in tool's tables are its own (their producer its name) and its Feeds name the catalog's
    metrics from those tables; a metric's tables are the tools' (in their order), then its own, its
    reference the tools' where they differ; a table's window is found among every tool's."""
    tools = catalogs()
    assert [name for name, tool in tools.items() if tool.tables] == ["nsys", "ncu", "torch"]
    for name, tool in tools.items():
        assert all(t.producer == name for t in tool.tables), name
        assert set(tool.feeds) <= set(c.METRICS) and all(set(f.tables) <= set(tool.tables) for f in tool.feeds.values())
    assert c.metric_tables(c.WINDOW_ITERATIONS, tools) == (nt.WINDOW, tt.WINDOW, c.STEPS_TIMES)
    assert c.metric_tables(c.IDLE_PCT, tools) == (nt.OVERLAP, tt.WINDOW)
    assert c.metric_tables(c.ITERATION_IDLE_PCT, tools) == (nt.ITERATIONS, tt.ITERATIONS)   # the same name, a figure
    assert c.metric_reference(c.WINDOW_DURATION, tools) == f"nsys: {nt.WINDOW.reference}; torch: {tt.WINDOW.reference}"
    assert c.metric_reference(c.CAPTURE_GPU_TIME[0], tools) == nt.CUDA_GPU_KERN_SUM.reference
    assert c.metric_reference(c.OVERLAP_PCT, tools) == c.OVERLAP_PCT.reference
    assert c.table_window(tt.TEMPORAL.name, tools) == c.CAPTURE and c.table_window("nsys_nothing", tools) == c.RUN


@pytest.fixture(scope="module")
def collected(repo: Path, gpu_data: Path, fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workdir of real GPU runs laid out as `hpcprof render` makes them, collected by the real
    `collect`: GPT-2 DDP under nsys at world size 1 and 2 (Echo's slowdown) and under torch.profiler
    at 2; seqpar bf16 on 2 H200s under nsys and under ncu."""
    tmp = tmp_path_factory.mktemp("catalog")
    work, data = tmp / "runs", gpu_data / "run3"
    polaris = ("--site", "polaris", "--set", "resources.account=PROJECT")
    ddp, seqpar = str(repo / "examples" / "ddp_slowdown.yaml"), str(repo / "examples" / "seqpar_polaris.yaml")
    hpcprof("render", ddp, *polaris, "-o", "r", cwd=tmp, check=True)
    hpcprof("render", ddp, *polaris, "-o", "t", "--set", "sweep={}", "--set", "profile.tool=torch", "--set",
            "resources.ranks_per_node=2", "--set", "workload.args.world_size=2", cwd=tmp, check=True)
    two_ranks = ("--set", "sweep={}", "--set", "resources.nodes=1", "--set", "resources.ranks_per_node=2")
    hpcprof("render", seqpar, *polaris, *two_ranks, "--set", "profile.ranks=all", "-o", "s", cwd=tmp, check=True)
    hpcprof("render", seqpar, *polaris, *two_ranks, "--set", "profile.tool=ncu", "--set", "profile.ranks=[0]",
            "-o", "n", cwd=tmp, check=True)
    for p, ws in ((0, 1), (1, 2)):
        gpu_run(work, tmp / "r" / f"p00{p}", f"{DDP}-p00{p}", "nsys",
                {f"rank{r}.sqlite": data / "nsys" / f"ddp_gpt2_p{ws}_rank{r}.sqlite" for r in range(ws)},
                data / "ddp" / f"nsys_p{ws}" / "ddp_steps.json")
    gpu_run(work, tmp / "t", TORCH_RUN, "torch",
            {f"rank{r}.pt.trace.json.gz": data / "torch" / f"rank{r}.pt.trace.json.gz" for r in (0, 1)},
            data / "ddp" / "torch_p2" / "ddp_steps.json")
    gpu_run(work, tmp / "s", SEQPAR, "nsys",
            {f"rank{r}.sqlite": fixtures_dir / "nsys" / "h200_seqpar_bf16" / f"rank{r}.sqlite" for r in (0, 1)},
            gpu_data / "run1" / "seqpar" / "nsys_bfloat16_p2" / "seqpar.json")
    gpu_run(work, tmp / "n", NCU_RUN, "ncu", {"rank0.csv": gpu_data / "run1" / "ncu" / "ncu_bfloat16_p2_rank0_details.csv"},
            gpu_data / "run1" / "seqpar" / "ncu_bfloat16_p2" / "seqpar.json")
    hpcprof("collect", "--workdir", str(work), cwd=tmp, check=True)
    return work


def runs_of(work: Path) -> dict[str, Path]:
    return {p.parent.name: p.parent for p in work.glob("*/*/config.json")}


@pytest.mark.slow
def test_what_collect_makes_is_declared(collected: Path) -> None:
    runs = runs_of(collected)
    assert len(runs) == 5
    made_tables: set[str] = set()
    made_metrics: set[str] = set()
    for run in runs.values():
        made_tables |= set(list_tables(run))
        headline = read_headline(run)
        assert headline is not None and headline.metrics, run
        for name, _, unit in headline.metrics:
            metric = c.declared(name)
            assert metric is not None, f"{name}: not declared in hpcprof.core.catalog"
            assert unit == metric.unit, (name, unit, metric.unit)
            made_metrics.add(metric.name)
    declared_tables = {t.name for t in c.every_table(catalogs())}
    assert made_tables <= declared_tables, sorted(made_tables - declared_tables)
    # these runs did not check their result, none is a `command` (the step hook's: tests/test_steps.py,
    # tests/test_profiler_slowdown.py) and none failed (forensics': tests/test_forensics.py) or measured its
    # ceilings (tests/test_ceilings.py)
    assert declared_tables - made_tables == {c.SEQPAR_CHECK.name, c.STEPS_TIMES.name, c.STEPS_PERTURBATION.name,
                                             c.STEPS_MEMORY.name, c.STEPS_MEMORY_SITES.name,
                                             c.STEPS_MEMORY_KINDS.name, c.STEPS_MEMORY_GROWTH.name, c.FORENSICS_RANKS.name,
                                             c.FORENSICS_COLLECTIVES.name, c.BENCH_CEILINGS.name}
    # every declared metric is made, but the overhead that report and compare find (tests/test_steps.py), the
    # slowdown of a `command`'s steps (tests/test_profiler_slowdown.py) or of a run with a reference run
    # (tests/test_workload_reference.py) and device memory, recorded where CUDA
    # is in use (tests/test_steps_memory.py); the idle by cause, of a trace of two ProfilerSteps or more
    # (this one has one: tests/test_idle.py)
    slowdown = {m.name for m in (c.PROFILER_SLOWDOWN, c.PROFILER_SLOWDOWN_LOW, c.PROFILER_SLOWDOWN_HIGH,
                                 c.PROFILER_UNPROFILED_STEP)}
    memory = {m.name for m in (c.MEMORY_PEAK_ALLOCATED, c.MEMORY_PEAK_RESERVED, c.MEMORY_FRAGMENTATION,
                               c.MEMORY_HEADROOM)}
    assert made_metrics == ({m.name for m in c.METRICS if m.headline} - {c.PROFILER_OVERHEAD.name, c.IDLE_CAUSE.name}
                            - slowdown - memory)


@pytest.mark.slow
def test_idle_pct_is_one_formula_over_every_window(collected: Path) -> None:
    """The window's, the capture's and each iteration's idle %: 100 · Σ idle / Σ span over the ranks
    (and devices), counted here by hand from the tables. The torch capture's is HTA's idle over its
    kernel time summed over the ranks (before: the mean of HTA's per-rank % rounded to 2 decimals,
    9.685 % on this run against 9.692 %)."""
    from hpcprof.report import sweep
    from hpcprof.report.runs import load

    runs = runs_of(collected)
    for run_id, window, capture in ((f"{DDP}-p001", "nsys_overlap", "nsys_capture_overlap"),
                                    (SEQPAR, "nsys_overlap", "nsys_capture_overlap"),
                                    (TORCH_RUN, "torch_window", "torch_temporal")):
        metrics = {name: value for name, value, _ in read_headline(runs[run_id]).metrics}
        w, cap = read_table(runs[run_id], window), read_table(runs[run_id], capture)
        assert metrics[c.IDLE_PCT.name] == pytest.approx(100 * w["idle_ns"].sum() / w["span_ns"].sum(), rel=1e-12)
        idle, span = ("idle_time(us)", "kernel_time(us)") if capture == "torch_temporal" else ("idle_ns", "span_ns")
        assert metrics[c.CAPTURE_IDLE_PCT.name] == pytest.approx(100 * cap[idle].sum() / cap[span].sum(), rel=1e-12)
    torch_capture = {n: v for n, v, _ in read_headline(runs[TORCH_RUN]).metrics}[c.CAPTURE_IDLE_PCT.name]
    assert round(torch_capture, 3) == 9.692

    infos = load([RunDir(runs[TORCH_RUN]), RunDir(runs[SEQPAR])], one_workload=False)
    points = [sweep.Point(info.run.run_id, pd.Series(dtype=object), [info]) for info in infos]
    per_iteration = sweep.gpu_idle_per_iteration(points)
    for info in infos:
        table = read_table(info.run.path, c.table_name(read_record(info.run).tool, "iterations"))
        mine = per_iteration[per_iteration["run"] == info.run.run_id].set_index("iteration")[c.ITERATION_IDLE_PCT.name]
        for iteration, rows in table.groupby("iteration"):
            span = (rows["end_ns"] - rows["start_ns"]).sum()
            expected = 100 * rows["idle_ns"].sum() / span if span else math.nan
            assert mine[iteration] == pytest.approx(expected, rel=1e-12, nan_ok=True)
        assert len(mine) == table["iteration"].nunique() > 0
