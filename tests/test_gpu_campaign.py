"""The window metrics on the committed 2x H200 window campaign (tests/fixtures/gpu/h200_window_campaign,
made by benchmarks/gpu/window_campaign.sh; provenance in tests/fixtures/SOURCES.md): the campaign's
workdir, re-collected here from its nsys SQLite exports by the real `hpcprof collect`, and each figure
checked against the exports read with plain sqlite3.

Runs: window-seqpar (seqpar S=4608 H=9216, 50 timed + 10 warm-up iterations, float32 p000/p001 and
bfloat16 p002/p003, nsys capture_range cudaProfilerApi), window-seqpar-nvtx (bfloat16, capture_range
nvtx on `timed`), echo-slowdown (GPT-2 DDP, world size 1 and 2) and window-never-opened (a `command`
that says it opens the capture range and never does).
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from fixture_files import STORED, materialize
from hpcprof_cli import hpcprof as run_cli
from test_report_html import chromium, drawn_figures, figure_count, findings, load_in_chromium

#: the collected campaign this module reads takes seconds to make (docs/developer/testing.md: Tiers)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SWEEP = "20261122-234202-18a6d5"
FP32 = (f"{SWEEP}-p000", f"{SWEEP}-p001")
BF16 = (f"{SWEEP}-p002", f"{SWEEP}-p003")
NVTX_RUN = "window-seqpar-nvtx/20261122-234301-2b23fc"
NEVER_RUN = "20261122-234359-f820d7"
ITERATIONS = 50


def hpcprof(*args: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """`hpcprof ARGS --workdir WORKDIR`, run as a user would (any exit status)."""
    return run_cli(*args, workdir=workdir, cwd=REPO, timeout=600)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """(a copy of the campaign's workdir, re-collected; that collect's result). The store's collect
    status from the GPU machine is cleared first, so `status` shows what this collect recorded."""
    workdir = materialize(tmp_path_factory.mktemp("window") / "w", STORED / "gpu" / "h200_window_campaign")
    with sqlite3.connect(workdir / "hpcprof.db") as db:
        db.execute("UPDATE runs SET collect_status = NULL, collect_note = NULL")
    return workdir, hpcprof("collect", "--workers", "2", workdir=workdir)


def run_dir(workdir: Path, run: str) -> Path:
    return next(workdir.glob(f"*/{run}")) if "/" not in run else workdir / run


def nvtx_ranges(con: sqlite3.Connection, name: str) -> list[tuple[int, int]]:
    return con.execute("""SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON n.textId = s.id
                          WHERE coalesce(n.text, s.value) = ? AND n.end IS NOT NULL ORDER BY n.start""",
                       (name,)).fetchall()


def timed_kernels(con: sqlite3.Connection, like: str = "%") -> list[tuple[int, int, int]]:
    """(launch start, kernel start, kernel end) of the kernels launched inside the `timed` NVTX range."""
    (t0, t1), = nvtx_ranges(con, "timed")
    return con.execute("""SELECT r.start, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k
                          JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
                          JOIN StringIds s ON s.id = k.shortName
                          WHERE r.start BETWEEN ? AND ? AND s.value LIKE ? ORDER BY k.start""",
                       (t0, t1, like)).fetchall()


def independent_window(export: Path) -> dict[str, int]:
    """The timed iterations projected onto the GPU, by hand: the kernels launched inside `timed`; the
    window from the first one's start to the last end; busy: the union of their intervals; iterations:
    the `iteration` ranges inside `timed` that launched a kernel."""
    with sqlite3.connect(export) as con:
        kernels = timed_kernels(con)
        (t0, t1), = nvtx_ranges(con, "timed")
        its = [(a, b) for a, b in nvtx_ranges(con, "iteration") if t0 <= a and b <= t1]
    busy, cur = 0, None
    for _, start, end in kernels:
        if cur is None or start > cur[1]:
            busy += 0 if cur is None else cur[1] - cur[0]
            cur = [start, end]
        else:
            cur[1] = max(cur[1], end)
    busy += cur[1] - cur[0]
    window = (kernels[0][1], max(end for _, _, end in kernels))
    with_work = sum(1 for a, b in its if any(a <= launch <= b for launch, _, _ in kernels))
    return {"start_ns": window[0], "end_ns": window[1], "busy_ns": busy, "iterations": with_work,
            "idle_pct": 100.0 * (1 - busy / (window[1] - window[0]))}


# -- 1. window ------------------------------------------------------------------------------------------

def test_fp32_idle_over_the_timed_iterations_matches_sqlite(campaign: tuple[Path, object]) -> None:
    workdir, _ = campaign
    for run in FP32:
        window = pd.read_parquet(run_dir(workdir, run) / "results" / "nsys_window.parquet").set_index("rank")
        assert sorted(window.index) == [0, 1] and set(window["window"]) == {"nvtx:timed"}
        for rank in (0, 1):
            hand = independent_window(run_dir(workdir, run) / "profiles" / "nsys" / f"rank{rank}.sqlite")
            row = window.loc[rank]
            assert row["iterations"] == hand["iterations"] == ITERATIONS
            assert (row["start_ns"], row["end_ns"], row["busy_ns"]) == (hand["start_ns"], hand["end_ns"],
                                                                         hand["busy_ns"])
            idle_pct = 100.0 * row["idle_ns"] / row["duration_ns"]
            assert idle_pct == pytest.approx(hand["idle_pct"], abs=1e-9)
            assert idle_pct < 10.0   # the timed loop is nearly all GPU work (benchmarks/gpu/results/window_campaign.md)
    out = hpcprof("compare", *FP32, "--format", "json", workdir=workdir)
    assert out.returncode == 0, out.stderr
    (point,) = json.loads(out.stdout)
    assert point["idle_pct [%]"] < 10.0 and point["window.iterations [count]"] == ITERATIONS
    assert point["idle_pct [%]"] == pytest.approx(0.23, abs=0.01)


# -- 2. capture -----------------------------------------------------------------------------------------

def test_a_capture_that_never_opened_is_partial_and_named(campaign: tuple[Path, subprocess.CompletedProcess[str]]
                                                           ) -> None:
    workdir, collected = campaign
    assert collected.returncode == 3, collected.stdout + collected.stderr
    text = collected.stdout + collected.stderr
    assert (f"{NEVER_RUN}: nsys: 2 of 2 profiled ranks have no file (ranks 0-1: nsys recorded nothing: the capture "
            "range never opened (logs/rank<N>.log: No reports were generated))") in text     # one line for both
    status = hpcprof("status", "--format", "json", workdir=workdir)
    assert status.returncode == 0, status.stderr
    collected_as = {row["run"]: row["collected"] for row in json.loads(status.stdout)}
    assert collected_as[NEVER_RUN].startswith("partial: nsys: 2 of 2 profiled ranks have no file (ranks 0-1: nsys "
                                              "recorded nothing: the capture range never opened")
    assert all(collected_as[run] == "complete" for run in FP32 + BF16)


def test_nvtx_capture_opened_late_rank1_recorded_no_gpu_work(campaign: tuple[Path, subprocess.CompletedProcess[str]]
                                                             ) -> None:
    """nsys's nvtx capture range on a 70 ms `timed` window: rank 1's export has no kernel at all and rank 0's
    starts 17 iterations late (nsys's start latency): collect says partial and names rank 1."""
    workdir, collected = campaign
    run = workdir / NVTX_RUN
    assert f"{run}/profiles/nsys/rank1.sqlite: skipped (NsysInputError" in collected.stdout + collected.stderr
    status = {row["run"]: row["collected"] for row in json.loads(hpcprof("status", "--format", "json",
                                                                           workdir=workdir).stdout)}
    assert status[run.name].startswith("partial: ") and "rank1.sqlite" in status[run.name]
    assert "no GPU activity" in status[run.name]
    with sqlite3.connect(run / "profiles" / "nsys" / "rank1.sqlite") as con:
        tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "CUPTI_ACTIVITY_KIND_KERNEL" not in tables and len(nvtx_ranges(con, "iteration")) == ITERATIONS
    hand = independent_window(run / "profiles" / "nsys" / "rank0.sqlite")
    window = pd.read_parquet(run / "results" / "nsys_window.parquet")
    assert window["rank"].tolist() == [0] and window["iterations"].tolist() == [hand["iterations"]] == [33]


# -- 3. report ------------------------------------------------------------------------------------------

@pytest.mark.slow   # Chromium
def test_sweep_report_explains_the_window(campaign: tuple[Path, object], tmp_path: Path) -> None:
    workdir, _ = campaign
    html = tmp_path / "report_window-seqpar.html"
    out = hpcprof("report", SWEEP, "--html", str(html), "--baseline", FP32[0], workdir=workdir)
    assert out.returncode == 0, out.stdout + out.stderr
    said = findings(html)
    idle = [s for s in said if s.startswith("GPU idle per measured iteration")]
    assert idle == ["GPU idle per measured iteration (median over iterations): precision=float32 0.139 %, "
                    "precision=bfloat16 1.94 %."], said
    assert any("GPU time (measured window: nvtx:timed, 50 iterations)" in s for s in said)
    assert any("-91.2 %: faster (Welch t-test over iterations (100 vs 100" in s for s in said)
    assert any(s.startswith("Critical path (precision=bfloat16): rank 0's matmul2 held the ReduceScatter in 78 of "
                            "100 iterations") for s in said)   # over the iterations (test_report_findings.py)
    assert figure_count(html) <= 24     # the report's bound (report.html.MAX_FIGURES)
    chromium()
    dom, console = load_in_chromium(html, tmp_path / "report.png")
    declared, drawn = drawn_figures(dom)
    assert console == [] and drawn == declared == figure_count(html)


def top_kernels_by_hand(exports: list[Path]) -> list[tuple[str, float]]:
    """The 3 kernels (demangled names) with the most GPU time per rank (over the ranks' exports / their
    number), counting the kernels launched inside the `timed` NVTX range: (name, ms)."""
    totals: dict[str, int] = {}
    for export in exports:
        with sqlite3.connect(export) as con:
            (t0, t1), = nvtx_ranges(con, "timed")
            for name, ns in con.execute("""SELECT s.value, sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                                           JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
                                           JOIN StringIds s ON s.id = k.demangledName
                                           WHERE r.start BETWEEN ? AND ? GROUP BY s.value""", (t0, t1)):
                totals[name] = totals.get(name, 0) + ns
    return [(name, ns / 1e6 / len(exports)) for name, ns in sorted(totals.items(), key=lambda kv: -kv[1])[:3]]


def test_collect_records_the_headline_the_tables_give(campaign: tuple[Path, object]) -> None:
    """Every collected run's results/headline.json holds what hpcprof.analysis.summary computes from its
    tables now (the values to the bit), and the top kernels of a bf16 run are those counted by hand."""
    from hpcprof.analysis.summary import run_headline
    from hpcprof.run.record import read_record
    from hpcprof.run.results import list_tables, read_headline
    from hpcprof.run.rundir import RunDir

    workdir, _ = campaign
    runs = [RunDir(p.parent) for p in sorted(workdir.glob("*/*/config.json")) if list_tables(p.parent)]
    assert len(runs) == 8
    for run in runs:
        recorded = read_headline(run.path)
        assert recorded is not None, run.path
        assert json.dumps(recorded) == json.dumps(run_headline(run.path, read_record(run))), run.path
    bf16 = run_dir(workdir, BF16[0])
    by_hand = top_kernels_by_hand(sorted((bf16 / "profiles" / "nsys").glob("rank*.sqlite")))
    top = read_headline(bf16).top_kernels_per_rank  # type: ignore[union-attr]
    assert [name for name, _, _ in top] == [name for name, _ in by_hand]
    assert [ms for _, ms, _ in top] == pytest.approx([ms for _, ms in by_hand], rel=1e-12)
    assert [category for _, _, category in top] == ["gemm", "gemm", "nccl.ReduceScatter"]


@pytest.mark.slow
def test_report_of_collected_runs_reads_the_recorded_headline(campaign: tuple[Path, object], tmp_path: Path) -> None:
    """`hpcprof report` of collected nsys runs reads the recorded headline (msgspec) and imports nothing of
    the run machinery (no torch, SQLAlchemy, Jinja, YAML); pandas only for what it computes across tables
    (its first block, what limits each point, and the bus bandwidth table); and it prints what it prints
    when the headline is computed from the tables again (recorded one removed, or damaged)."""
    from test_startup_imports import heavy_imports

    workdir, _ = campaign
    assert heavy_imports("report", BF16[0], "--workdir", str(workdir), cwd=tmp_path) == {
        "msgspec", "rich", "pandas", "numpy"}

    def printed() -> list[str]:
        out = hpcprof("report", *BF16, workdir=workdir)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()[:-1]  # the last line is the time it was printed

    recorded = printed()
    shown = "\n".join(recorded)
    assert "gpu.gemm.share" in shown and "nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_NNN" in shown
    note = run_dir(workdir, BF16[0]) / "results" / "headline.json"
    saved = note.read_bytes()
    try:
        note.unlink()
        assert printed() == recorded
        note.write_text('{"metrics": [["iteration.mean", "damaged"')
        assert printed() == recorded
    finally:
        note.write_bytes(saved)


def test_collect_again_replaces_a_stale_headline(campaign: tuple[Path, object]) -> None:
    from hpcprof.analysis.summary import run_headline
    from hpcprof.run.record import read_record
    from hpcprof.run.results import Headline, read_headline, write_headline
    from hpcprof.run.rundir import RunDir

    workdir, _ = campaign
    run = RunDir(run_dir(workdir, FP32[0]))
    write_headline(run.path, Headline([("iteration.mean", 1e9, "ms")], []))
    out = hpcprof("collect", FP32[0], workdir=workdir)
    assert out.returncode == 0, out.stderr
    assert json.dumps(read_headline(run.path)) == json.dumps(run_headline(run.path, read_record(run)))


# -- 4. verdicts ----------------------------------------------------------------------------------------

def welch_p(a: list[float], b: list[float]) -> float:
    """Two-sided Welch p, independently of hpcprof.report.stats: the t distribution's tail integrated
    numerically (Simpson, 20000 steps) from its density."""
    import math

    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    t = abs(ma - mb) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    n = 20000
    h = t / n
    area = sum((1 if i in (0, n) else 4 if i % 2 else 2) * c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2)
               for i in range(n + 1)) * h / 3
    return 1 - 2 * area


def test_two_fp32_repetitions_show_no_significant_change(campaign: tuple[Path, object]) -> None:
    """The two fp32 repetitions judged through the verdict code compare uses, each run's 50 iteration
    times (mean over ranks) against the other's, checked against an independent Welch p."""
    from hpcprof.report.compare import comparison, with_baseline
    from hpcprof.report.runs import load, select_runs
    from hpcprof.report.verdict import ITERATION, add_verdicts, iteration_samples

    workdir, _ = campaign
    infos = load(select_runs(FP32, workdir))
    frame = comparison(infos)
    samples = {i.run.run_id: iteration_samples(i.run.path, i.kind, i.tool) for i in infos}
    judged = add_verdicts(with_baseline(frame, 0), 0, samples, dict(zip(frame["run"], frame[ITERATION], strict=True)))
    row = judged.iloc[1]
    assert [len(samples[r]) for r in FP32] == [ITERATIONS, ITERATIONS]
    assert row["verdict"] == "no significant change"
    assert row["test"] == "Welch t-test over iterations (50 vs 50; fewer than 3 repetitions)"
    assert row["change_pct"] == pytest.approx(0.0116, abs=0.0005)          # 15.8917 -> 15.8936 ms
    assert row["p_value"] == pytest.approx(welch_p(samples[FP32[1]], samples[FP32[0]]), abs=1e-4)
    assert row["p_value"] == pytest.approx(0.814, abs=0.001)


def test_fail_if_slower_gates_on_the_sweep(campaign: tuple[Path, object]) -> None:
    workdir, _ = campaign
    against_fp32 = hpcprof("compare", SWEEP, "--baseline", FP32[0], "--fail-if-slower", "5", "--format", "json",
                           workdir=workdir)
    assert against_fp32.returncode == 0, against_fp32.stderr
    bf16 = next(r for r in json.loads(against_fp32.stdout) if r["workload.args.precision"] == "bfloat16")
    assert bf16["verdict"] == "faster" and bf16["change_pct"] == pytest.approx(-91.2, abs=0.1)
    against_bf16 = hpcprof("compare", SWEEP, "--baseline", BF16[0], "--fail-if-slower", "5", workdir=workdir)
    assert against_bf16.returncode == 1, against_bf16.stdout + against_bf16.stderr


# -- 5. critical path -----------------------------------------------------------------------------------

def test_bf16_critical_path_rows_and_one_wait_by_hand(campaign: tuple[Path, object]) -> None:
    workdir, _ = campaign
    for run in BF16:
        table = pd.read_parquet(run_dir(workdir, run) / "results" / "nsys_critical_path.parquet")
        assert table["iteration"].tolist() == list(range(ITERATIONS))
        assert (table["held_ns"] >= 0).all() and (table["iteration_ns"] > 0).all()
    table = pd.read_parquet(run_dir(workdir, BF16[0]) / "results" / "nsys_critical_path.parquet")
    durations = []
    for rank in (0, 1):
        with sqlite3.connect(run_dir(workdir, BF16[0]) / "profiles" / "nsys" / f"rank{rank}.sqlite") as con:
            durations.append([end - start for _, start, end in timed_kernels(con, "ncclDevKernel_ReduceScatter%")])
    assert [len(d) for d in durations] == [ITERATIONS, ITERATIONS]
    first = table.iloc[0]   # iteration 0: rank 1 waited in the ReduceScatter while rank 0's matmul1 ran late
    assert (first["collective"], first["critical_rank"], first["held_by"]) == ("ReduceScatter", 0, "matmul1")
    assert first["held_ns"] == max(durations[0][0], durations[1][0]) - min(durations[0][0], durations[1][0])
    assert first["held_ns"] == 182718


# -- the torch half of benchmarks/gpu/critical_path.sh --------------------------------------------------

def test_critical_path_delay_profiler_marks_every_timed_iteration(tmp_path: Path) -> None:
    """critical_path_delay.py's profiler writes ProfilerStep#i for timed iteration i (torch.profiler marks
    steps only under a schedule: the plain profiler it used left `trace critical-path` 0 iterations)."""
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("critical_path_delay", REPO / "benchmarks/gpu/critical_path_delay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    prof = module.step_profiler([torch.profiler.ProfilerActivity.CPU])
    prof.start()
    for i in range(4):
        if i > 0:
            prof.step()
        with torch.profiler.record_function("iteration"):
            torch.mm(torch.rand(32, 32), torch.rand(32, 32))
    prof.stop()
    trace = tmp_path / "rank0.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    names = [e["name"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "user_annotation"]
    assert sorted(n for n in names if n.startswith("ProfilerStep")) == [f"ProfilerStep#{i}" for i in range(4)]


def kineto_trace(path: Path, steps: bool) -> Path:
    """A one-rank Kineto trace by hand: a matmul kernel and an NCCL all-reduce launched inside an
    `iteration` annotation, in a ProfilerStep#0 when `steps`."""
    def launch(name: str, ts: float, corr: int) -> list[dict[str, object]]:
        return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 2,
                 "args": {"correlation": corr}},
                {"ph": "X", "cat": "kernel", "name": name, "ts": ts + 5, "dur": 10,
                 "args": {"stream": 7 if name.startswith("nccl") else 9, "correlation": corr}}]

    events = [{"ph": "X", "cat": "user_annotation", "name": "iteration", "ts": 100, "dur": 50},
              *launch("sm90_gemm", 110, 1), *launch("ncclDevKernel_AllReduce_Sum_f32", 130, 2)]
    if steps:
        events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 99, "dur": 52})
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}))
    return path


def test_trace_critical_path_says_when_a_trace_has_no_profiler_steps(tmp_path: Path) -> None:
    """The GPU check's torch traces (no schedule: no ProfilerStep#N) gave an empty table in silence;
    such a trace is now named with the cause, and the command exits 2."""
    from hpcprof.tools.torch.analysis import critical_path as trace_cp

    with_steps = kineto_trace(tmp_path / "rank0.pt.trace.json", steps=True)
    events, errors = trace_cp.load_events([with_steps])
    assert errors == [] and events is not None and set(events["iteration"]) == {0}
    (tmp_path / "plain").mkdir()
    without = kineto_trace(tmp_path / "plain" / "rank0.pt.trace.json", steps=False)
    events, errors = trace_cp.load_events([without])
    assert events is None
    assert errors == [f"{without}: no collective in an iteration: no ProfilerStep#N range with NCCL work "
                      "launched in it (torch.profiler marks steps only when profile() is given a schedule)"]
    cli = subprocess.run([sys.executable, "-m", "hpcprof", "trace", "critical-path", str(without)], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)
    assert cli.returncode == 2 and "no collective in an iteration: no ProfilerStep#N" in cli.stderr, cli.stderr


def test_compare_two_repetitions_against_each_other(campaign: tuple[Path, object]) -> None:
    """`compare RUN0 RUN1 --baseline RUN0` on two repetitions of one point: the baseline run is its own
    row and the other is judged against it (the verdict of the test above, through the command)."""
    workdir, _ = campaign
    result = hpcprof("compare", *FP32, "--baseline", FP32[0], "--format", "json", workdir=workdir)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["run"] for r in rows] == [FP32[0], FP32[1]]
    assert rows[1]["verdict"] == "no significant change"
    assert rows[1]["change_pct"] == pytest.approx(0.0116, abs=0.0005)
    assert rows[1]["p_value"] == pytest.approx(0.814, abs=0.001)
