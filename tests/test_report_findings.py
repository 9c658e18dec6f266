"""The report's findings and tables that misled a reader of the committed 2x H200 window campaign,
each checked against the runs' own files: the critical path summarised over the
iterations, stragglers named only above noise, compare's top kernel per rank, no ratio on a rank
id and p-values as `< 1e-3`, the measured window named (never `window.iterations 0` beside a
duration), every figure and table saying its window, the HTML of a run without metrics saying why,
`status` fitting a 100-column terminal and collect's messages whole."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections import Counter
from html import unescape
from pathlib import Path
from statistics import median

import numpy as np
import pandas as pd
import pytest
from test_report_html import findings
from window_campaign import (
    BF16,
    ECHO,
    ECHO_RUNS,
    FP32,
    NEVER_RUN,
    NVTX_RUN,
    SWEEP,
    hpcprof,
    run_dir,
)

from hpcprof.core import catalog as c
from hpcprof.tools.nsys import tables as nt

#: the collected campaign this module reads takes seconds to make (docs/developer/testing.md: Tiers)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def campaign(window_campaign: tuple[Path, subprocess.CompletedProcess[str]]) -> tuple[Path, str]:
    """(the campaign's workdir, collected once per session; what that collect printed)."""
    workdir, collected = window_campaign
    return workdir, collected.stdout + collected.stderr


@pytest.fixture(scope="module")
def reports(campaign: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The HTML reports of the seqpar sweep (against fp32), of one bf16 run and of the Echo pair."""
    workdir, _ = campaign
    out = tmp_path_factory.mktemp("reports")
    pages = {"sweep": (SWEEP, "--baseline", FP32[0]), "bf16": (BF16[0],), "echo": (ECHO,)}
    for name, args in pages.items():
        done = hpcprof("report", *args, "--html", str(out / f"{name}.html"), workdir=workdir)
        assert done.returncode == 0, done.stderr
    return {name: out / f"{name}.html" for name in pages}


def compare_json(workdir: Path, *args: str) -> list[dict]:
    done = hpcprof("compare", *args, "--format", "json", workdir=workdir)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def critical_rows(workdir: Path, runs: tuple[str, ...]) -> list[dict]:
    return [row for run in runs for row in
            pd.read_parquet(run_dir(workdir, run) / "results" / "nsys_critical_path.parquet").to_dict("records")]


# -- 1. the critical path over the iterations ----------------------------------------------------

@pytest.mark.parametrize("page, runs", [("bf16", BF16[:1]), ("sweep", BF16)])
def test_the_critical_path_is_summarised_over_the_iterations(campaign: tuple[Path, str], reports: dict[str, Path],
                                                             page: str, runs: tuple[str, ...]) -> None:
    """Iteration 0 had rank 0's matmul1 hold the ReduceScatter 0.183 ms, but in 44 of bf16's first run's 50
    iterations (78 of the point's 100) it was rank 0's matmul2, for about 15 µs: the sentence says the latter."""
    rows = critical_rows(campaign[0], runs)
    held = Counter((r["critical_rank"], r["held_by"], r["collective"]) for r in rows)
    (rank, held_by, collective), count = held.most_common(1)[0]
    assert (rank, held_by, collective) == (0, "matmul2", "ReduceScatter") and count == {1: 44, 2: 78}[len(runs)]
    waits = [r["held_ns"] for r in rows if (r["critical_rank"], r["held_by"], r["collective"]) == (0, "matmul2",
                                                                                                  "ReduceScatter")]
    said = [s for s in findings(reports[page]) if s.startswith("Critical path (precision=bfloat16")]
    assert len(said) == 1 and "iteration 0:" not in said[0], said
    assert (f"rank 0's matmul2 held the ReduceScatter in {count} of {len(rows)} iterations; the others waited "
            f"{median(waits) / 1e3:.3g} µs at the median") in said[0]
    assert f"and {max(waits) / 1e3:.3g} µs at worst" in said[0]
    longest = max(rows, key=lambda r: r["held_ns"])            # iteration 0: rank 0's matmul1, 0.183 ms
    assert f"the longest wait: rank 0's matmul1 held the ReduceScatter for {longest['held_ns'] / 1e6:.3f} ms" in said[0]


# -- 2. stragglers above noise only --------------------------------------------------------------

def excess_by_hand(run: Path) -> list[tuple[float, int, int]]:
    """(slowest rank's step time minus the median rank's, that rank, step) of each counted step of a
    ddp run, from the workload's own JSON."""
    steps = pd.DataFrame(json.loads((run / "results" / "ddp_steps.json").read_text())["steps"])
    steps = steps[(steps["phase"] == "step") & steps["counted"] & ~steps["window"]]
    out = []
    for step, g in steps.groupby("iteration"):
        slowest = g.loc[g["time_ms"].idxmax()]
        out.append((float(slowest["time_ms"] - g["time_ms"].median()), int(slowest["rank"]), int(step)))
    return out


def test_no_straggler_is_named_for_noise(campaign: tuple[Path, str], reports: dict[str, Path]) -> None:
    """The seqpar ranks differ by 0.04 % on average, well inside the repetitions' CI: no rank is named a
    straggler (two sentences named different ranks before); Echo's one 305 ms step is named as an iteration."""
    said = findings(reports["sweep"])
    assert not [s for s in said if "lags most" in s or "was the slowest in" in s], said
    assert any(s.startswith("No straggler above noise:") and "0.0401 %" in s for s in said), said
    echo = findings(reports["echo"])
    assert not [s for s in echo if "lags most" in s or "was the slowest in" in s or s.startswith("Straggler (")]
    worst, rank, step = max(excess_by_hand(run_dir(campaign[0], ECHO_RUNS[1])))
    assert worst > 300 and (rank, step) == (1, 31)
    (outlier,) = [s for s in echo if s.startswith("Straggler iterations (")]
    assert f"the worst: rank {rank}, {worst:,.1f} ms" in outlier and f"in iteration {step} of run {ECHO_RUNS[1]}" in outlier


# -- 3, 4. compare: the top kernel per rank, no ratio on rank ids, p-values ------------------------

def test_compare_top_kernel_is_per_rank(campaign: tuple[Path, str]) -> None:
    """World size 1 and 2 run the same top kernel for the same time per rank (8.6 ms); its sum over the two
    ranks (17.4 ms) was shown before, beside per-rank rows."""
    workdir, _ = campaign
    rows = compare_json(workdir, ECHO)
    for row, run in zip(rows, ECHO_RUNS, strict=True):
        kernels = pd.read_parquet(run_dir(workdir, run) / "results" / "nsys_kernels.parquet")
        per_rank = kernels.groupby("name")["total_ns"].sum() / kernels["rank"].nunique() / 1e6
        assert row["top kernel"] == per_rank.idxmax()
        assert row[c.TOP_KERNEL_TIME.column] == pytest.approx(per_rank.max())
    assert rows[1][c.TOP_KERNEL_TIME.column] == pytest.approx(rows[0][c.TOP_KERNEL_TIME.column], rel=0.05)


def table_row(text: str, name: str) -> list[str]:
    """The cells of the comparison table's row `name`."""
    line = next(line for line in text.splitlines() if line.startswith(f"│ {name} "))
    return [cell.strip() for cell in line.strip("│").split("│")[1:]]


def test_compare_baseline_leaves_rank_ids_alone_and_prints_small_p(campaign: tuple[Path, str]) -> None:
    """Against the bf16 point (slowest rank 1), fp32's slowest rank 0 got `×0.00`; its p was printed 0 and
    the baseline's 1."""
    import os

    workdir, _ = campaign
    done = hpcprof("compare", SWEEP, "--baseline", BF16[0], workdir=workdir, env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    assert table_row(done.stdout, "slowest_rank") == ["0", "1"]
    assert "×" in table_row(done.stdout, "iteration.mean")[0]
    assert table_row(done.stdout, "p (Welch)") == ["< 1e-3", ""]
    rows = compare_json(workdir, SWEEP, "--baseline", BF16[0])
    assert f"{c.SLOWEST_RANK.column} /base" not in rows[0] and rows[1]["p_value"] is None
    assert 0 <= rows[0]["p_value"] < 1e-3


# -- 5. the measured window named ---------------------------------------------------------------

def test_the_window_is_named_and_never_zero_iterations_beside_a_duration(campaign: tuple[Path, str]) -> None:
    """Echo's one-step capture holds no iteration range: its window is the whole capture (39.5 ms), said
    as such, not `window.iterations 0`."""
    workdir, _ = campaign
    for row in compare_json(workdir, ECHO):
        assert row[c.WINDOW_DURATION.column] > 0 and c.WINDOW_ITERATIONS.column not in row
        assert row["window"] == "the whole capture, no iteration range in it"
    (fp32, _) = compare_json(workdir, SWEEP)
    assert fp32["window"] == "nvtx:timed, 50 iterations" and fp32[c.WINDOW_ITERATIONS.column] == 50


# -- 6. every figure and table says its window ----------------------------------------------------

def captions(html: Path) -> tuple[list[str], list[str]]:
    """(the figures' titles, each table's caption and header) of a report."""
    text = html.read_text()
    return ([unescape(t) for t in re.findall(r"<figcaption>(.*?)</figcaption>", text)],
            [unescape(re.sub(r"<[^>]+>", " ", t)) for t in re.findall(r"<table>(<caption>.*?</tr>)", text)])


@pytest.mark.parametrize("page", ["sweep", "echo"])
def test_every_figure_and_table_says_its_window(reports: dict[str, Path], page: str) -> None:
    """In its title (its caption), or a table in a window column of its own (the headline metrics)."""
    figures, tables = captions(reports[page])
    declared = int(re.search(r"data-figures='(\d+)'", reports[page].read_text()).group(1))
    assert len(figures) == declared > 10
    tables = [t for t in tables if not t.startswith(" The peaks and their sources ")]    # constants: no window
    assert len(tables) > 5
    for title in figures + tables:
        assert any(window in title for window in c.WINDOWS) or " window " in title, title
    by_capture = [t for t in figures if "whole capture" in t]
    if page == "echo":   # the appendix' Echo slowdown is over the whole capture, and says so
        assert any(t.startswith("kernel slowdown distribution") for t in by_capture), figures


# -- 8. a run without metrics says why -----------------------------------------------------------

def test_the_html_of_a_run_with_nothing_collected_says_why(campaign: tuple[Path, str], tmp_path: Path) -> None:
    workdir, _ = campaign
    html = tmp_path / "never.html"
    assert hpcprof("report", NEVER_RUN, "--html", str(html), workdir=workdir).returncode == 0
    (said,) = findings(html)
    assert said.startswith(f"Run {NEVER_RUN} COMPLETED") and "the capture range never opened" in said


# -- terminal ------------------------------------------------------------------------------------

def on_a_terminal(columns: int, *args: str, workdir: Path) -> str:
    """What `hpcprof ARGS --workdir WORKDIR` prints on a terminal `columns` wide (a pseudo-terminal)."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    with subprocess.Popen([sys.executable, "-m", "hpcprof", *args, "--workdir", str(workdir)], stdout=side,
                          stderr=subprocess.DEVNULL, env=env) as proc:
        os.close(side)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 1 << 16)
            except OSError:             # the terminal closed: the command ended
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=120) == 0
    os.close(main)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r\n", "\n")


def test_status_fits_a_100_column_terminal(campaign: tuple[Path, str]) -> None:
    """Tables take rich's console width, the terminal's: `status` printed 215-character lines on a 100-column
    terminal; it leaves out what does not fit, and says so. A pipe or a file still gets every column."""
    workdir, _ = campaign
    lines = on_a_terminal(100, "status", workdir=workdir).splitlines()
    assert max(len(line) for line in lines) <= 100
    for run in (*FP32, *BF16, NEVER_RUN):      # run ids whole, never cut
        assert any(f"│ {run} " in line for line in lines), run
    assert any(line.startswith("not shown at 100 columns: ") for line in lines)
    wide = hpcprof("status", workdir=workdir)
    assert "path" in wide.stdout.splitlines()[1] and "not shown" not in wide.stdout


def test_collect_messages_are_whole(campaign: tuple[Path, str]) -> None:
    """nsys's message for the nvtx run's empty rank-1 export ends `... was the run traced with -t cuda?)`:
    collect cut it at 160 characters (`... was the run )`)."""
    from hpcprof.tools.nsys.stats.schema import NO_GPU_ACTIVITY

    workdir, printed = campaign
    export = run_dir(workdir, NVTX_RUN) / "profiles" / "nsys" / "rank1.sqlite"
    assert f"{export}: {NO_GPU_ACTIVITY})" in printed, printed


# -- figures, as Chromium draws them ------------------------------------------------------------

#: measures every figure once the page has drawn: its box, plotly's toolbar, its caption, its plot areas
PROBE = """<script>window.addEventListener('load', () => setTimeout(() => {
  const box = e => e ? (({left, top, right, bottom}) => ({left, top, right, bottom}))(e.getBoundingClientRect()) : null;
  const figs = Array.from(document.querySelectorAll('div.plotly-graph-div')).map(div => ({
    id: div.id, box: box(div), toolbar: box(div.querySelector('.modebar-container')),
    caption: box(div.closest('figure') && div.closest('figure').querySelector('figcaption')),
    caption_text: div.closest('figure') ? div.closest('figure').querySelector('figcaption').textContent : '',
    titles: Array.from(div.querySelectorAll('.gtitle')).map(t => t.textContent).filter(t => t),
    areas: Array.from(div.querySelectorAll('rect.nsewdrag')).map(box)}));
  document.body.setAttribute('data-layout', JSON.stringify({view: window.innerWidth,
    page: document.documentElement.scrollWidth, content: document.body.clientWidth, figs}));
}, 500));</script>"""


def drawn_layout(html: Path, tmp_path: Path, width: int) -> dict:
    """The page measured in headless Chromium at `width` pixels (PROBE)."""
    import subprocess
    import tempfile

    from test_report_html import CHROMIUM_FLAGS, chromium

    probe = tmp_path / f"{html.stem}.probe.html"
    probe.write_text(html.read_text().replace("</body>", PROBE + "</body>"))
    with tempfile.TemporaryDirectory(prefix="hpcprof-chromium-") as profile:
        dom = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},2000",
                              "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    return json.loads(unescape(re.search(r'data-layout="([^"]*)"', dom.stdout).group(1)))


def plotly_figures(html: Path) -> dict[str, tuple[list[dict], dict]]:
    """Each figure's (traces, layout) as the page hands them to plotly."""
    text, decoder, out = html.read_text(), json.JSONDecoder(), {}
    for found in re.finditer(r'Plotly\.newPlot\(\s*"(fig\d+)",\s*', text):
        data, end = decoder.raw_decode(text, found.end())
        layout, _ = decoder.raw_decode(text, re.compile(r",\s*").match(text, end).end())
        out[found.group(1)] = (data, layout)
    return out


@pytest.mark.slow   # Chromium
@pytest.mark.parametrize("page", ["sweep", "echo"])
def test_figures_take_the_page_width_and_keep_their_plot_area(reports: dict[str, Path], page: str,
                                                              tmp_path: Path) -> None:
    """At 1,400 and 1,920 px each figure spans the page (they were ~550 px), its title is its caption, above the
    plotly toolbar (which covered titles), and every plot area keeps its room (the timeline's collapsed to
    nothing beside a long kernel name in its legend); no page is wider than the window."""
    for width in (1400, 1920):
        drawn = drawn_layout(reports[page], tmp_path, width)
        assert drawn["page"] <= drawn["view"]
        for fig in drawn["figs"]:
            wide = fig["box"]["right"] - fig["box"]["left"]
            assert wide >= 0.95 * drawn["content"], (fig["id"], wide, drawn["content"])
            assert fig["titles"] == [] and fig["caption"]["bottom"] <= fig["toolbar"]["top"], fig
            assert fig["areas"], fig["caption_text"]
            for area in fig["areas"]:
                assert area["right"] - area["left"] >= 0.3 * wide / len(fig["areas"]), fig["caption_text"]
                assert area["bottom"] - area["top"] >= 100, fig["caption_text"]


def test_values_of_different_scales_get_axes_of_their_own(reports: dict[str, Path]) -> None:
    """fp32's 15.9 ms iteration and bf16's 1.4 ms: one facet each with its own axis (bf16's was a sliver
    beside fp32's on one linear axis); repetitions are `#1`, `#2` in every figure (`#1.0` in one before)."""
    figures = plotly_figures(reports["sweep"])
    titles = dict(zip(figures, captions(reports["sweep"])[0], strict=True))
    (iteration,) = [f for f, t in titles.items() if t.startswith("How long is an iteration")]
    data, layout = figures[iteration]
    assert {"yaxis", "yaxis2"} <= set(layout) and "matches" not in layout["yaxis2"]
    assert {t["xaxis"] for t in data} == {"x", "x2"}
    named = [t["name"] for f, t in titles.items() if t.startswith(("Which iterations", "Does the iteration",
                                                                     "How idle")) for t in figures[f][0]]
    assert len(named) == 12 and all(re.fullmatch(r"precision=(float32|bfloat16) #[12]", n) for n in named), named


def test_a_single_idle_gap_is_drawn_on_the_window(campaign: tuple[Path, str], reports: dict[str, Path]) -> None:
    """bf16's first run has one GPU idle gap over 0.1 ms: it was a point on a -1 to 1 s axis; it is drawn at its
    time from the window's start on the window's length."""
    workdir, _ = campaign
    results = run_dir(workdir, BF16[0]) / "results"
    (gap,) = pd.read_parquet(results / "nsys_gaps.parquet").to_dict("records")
    window = pd.read_parquet(results / "nsys_window.parquet").set_index("rank")
    figures = plotly_figures(reports["bf16"])
    titles = dict(zip(figures, captions(reports["bf16"])[0], strict=True))
    (gaps,) = [f for f, t in titles.items() if t.startswith("GPU idle gaps")]
    data, layout = figures[gaps]
    assert layout["xaxis"]["range"] == [0, pytest.approx(window["duration_ns"].max() / 1e6)]
    assert layout["xaxis"]["title"]["text"] == "ms from the window's start"
    (trace,) = data
    x = trace["x"]            # plotly's typed array, or a list
    drawn = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"]) if isinstance(x, dict) else np.array(x)
    assert drawn.tolist() == [pytest.approx((gap["start_ns"] - window.loc[gap["rank"], "start_ns"]) / 1e6)]


# -- what limits each point, and the top fixes (hpcprof.report.limits) ------------------------------

def window_nccl_ms(workdir: Path, runs: tuple[str, ...], iterations: int) -> float:
    """NCCL kernel time per rank and iteration of the `timed` window, from the rank exports with
    SQL alone: kernels whose launch (the CUDA runtime call, same process) lies in the NVTX range."""
    import sqlite3

    sql = ("WITH t AS (SELECT start, end FROM NVTX_EVENTS WHERE text = 'timed') "
           "SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON k.shortName = s.id "
           "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
           "AND r.globalTid / 16777216 = k.globalPid / 16777216, t "
           "WHERE s.value LIKE 'nccl%' AND r.start >= t.start AND r.start <= t.end")
    per_rank = []
    for run in runs:
        for export in sorted((run_dir(workdir, run) / "profiles" / "nsys").glob("rank*.sqlite")):
            with sqlite3.connect(export) as db:
                per_rank.append(db.execute(sql).fetchone()[0] / 1e6 / iterations)
    return sum(per_rank) / len(per_rank)


def diagnosis_block(text: str) -> list[str]:
    """The terminal report's first block (what limits each point), its lines."""
    lines = text.splitlines()
    assert "what limits each point" in lines[0], lines[:3]
    end = next(i for i, line in enumerate(lines[1:], 1) if line.startswith("─"))
    return lines[1:end]


def test_the_first_screen_says_what_limits_each_point_and_the_top_fixes(campaign: tuple[Path, str],
                                                                         reports: dict[str, Path]) -> None:
    workdir, _ = campaign
    done = hpcprof("report", SWEEP, workdir=workdir, env={**__import__("os").environ, "COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    block = " ".join(diagnosis_block(done.stdout))
    # bf16: 70 % GEMM, the NCCL kernels' time exposed (0 % overlap): compute limits, the first fix hides a collective
    bf16 = block[block.index("precision=bfloat16"):]
    assert bf16.startswith("precision=bfloat16: limited by compute"), bf16[:200]
    nccl = window_nccl_ms(workdir, BF16, 50)
    exposed = float(re.search(r"exposed communication ([\d.]+) ms", bf16).group(1))
    assert exposed == pytest.approx(nccl, rel=0.01)
    fixes = re.findall(r"\d\. ([^:]+): ≤ ([\d.]+) (ms|µs)", bf16)
    assert fixes[0][0].startswith("overlap the ") and len(fixes) == 3
    bounds = [float(v) / (1e3 if unit == "µs" else 1) for _, v, unit in fixes]
    assert bounds == sorted(bounds, reverse=True)           # ranked by the time they could save
    assert sum(bounds[:2]) == pytest.approx(nccl, rel=0.02)  # the two collectives' exposed times
    # fp32: GEMM is 95 % of the step
    fp32 = block[block.index("precision=float32"):block.index("precision=bfloat16")]
    share = float(re.search(r"limited by compute: [\d.]+ ms \(([\d.]+) %\)", fp32).group(1))
    assert share > 90
    # the HTML's first section is the same diagnosis, before the findings
    page = reports["sweep"].read_text()
    assert page.index("<section id='diagnosis'>") < page.index("<section id='findings'>")
    assert "precision=bfloat16: limited by compute" in unescape(page)


def test_no_fix_below_the_noise_and_the_unprofiled_part_is_never_the_limiter(campaign: tuple[Path, str]) -> None:
    from hpcprof.report import limits, sweep
    from hpcprof.report.runs import load, select_runs

    workdir, _ = campaign
    for selection in (SWEEP, ECHO, NVTX_RUN):
        points = sweep.sweep_points(load(select_runs((selection,), workdir), require_collected=True,
                                         one_workload=True), None)
        found = limits.diagnoses(points)
        assert len(found) == len(points)
        for d in found:
            assert d.noise_ms > 0
            assert all(f.saves_ms > d.noise_ms for f in d.fixes)
            assert d.limiter is not None and d.limiter.observed
            assert d.limiter.ms == max(p.ms for p in d.parts if p.observed)
            # the parts, the imbalance and the time outside the window among them, sum to the step, to
            # within the GPU's busy time (the union of its intervals) less its kernels' categories
            assert sum(p.ms for p in d.parts) == pytest.approx(d.step_ms, rel=0.02)
            assert all(p.ms >= 0 for p in d.parts)
            unseen = [p for p in d.parts if not p.observed]
            if selection == ECHO:   # Echo's window is one backward pass: the rest of the step is not profiled
                step = limits.step_time(next(p for p in points if p.label == d.point))
                assert step is not None and [p.ms for p in unseen] == [pytest.approx(d.step_ms - step.window_ms)]


def test_a_trainers_collectives_get_a_fix_against_the_ceiling_nearest_in_size(campaign: tuple[Path, str],
                                                                              tmp_path: Path) -> None:
    """A DDP trainer reports no collective rate of its own: its all-reduces' bus bandwidth per size bucket
    (the profiler's busbw table, per-rank rows) against the ceiling measured in the same job nearest in
    size gives the fix `time per step x (1 - busbw / ceiling)`. The Echo ws2 run, copied, given a busbw
    table with sizes and a bench_ceilings table; the bound checked by hand."""
    import shutil

    from hpcprof.report import limits, sweep
    from hpcprof.report.runs import load, select_runs
    from hpcprof.run.results import write_table

    workdir = tmp_path / "work"
    shutil.copytree(campaign[0], workdir, symlinks=True)
    points = sweep.sweep_points(load(select_runs((ECHO,), workdir), require_collected=True, one_workload=True), None)
    ws2 = max(points, key=lambda p: p.first.record.world_size)
    base = {"scope": "rank", "window": "measured", "group": "0", "group_size": 2, "collective": "AllReduce",
            "bucket": "16-32 MiB", "bucket_lo": 2**24, "bucket_hi": 2**25, "bytes": 27e6, "total_bytes": 540e6,
            "algbw_gbps": 0.0, "note": ""}
    busbw = pd.DataFrame([{**base, "rank": 0, "count": 20, "median_ns": 2.0e6, "busbw_gbps": 100.0},
                          {**base, "rank": 1, "count": 20, "median_ns": 2.2e6, "busbw_gbps": 90.0}])
    write_table(ws2.first.run.path, nt.BUSBW.name, busbw)
    ceiling = {"kind": "collective", "op": "all_reduce", "dtype": "float32", "world_size": 2,
               "statistic": "calls back to back (NCCL's API, one CUDA graph of the calls) / calls", "device_name": "x",
               "created": "2026-11-26T16:14:57+00:00"}
    write_table(ws2.first.run.path, c.BENCH_CEILINGS.name, pd.DataFrame([
        {**ceiling, "bytes": 2**24, "busbw_GBps": 200.0},      # 27 MB is nearer 16 MiB (log ratio 0.48) ...
        {**ceiling, "bytes": 2**26, "busbw_GBps": 250.0}]))    # ... than 64 MiB (0.91)
    found = {d.point: d for d in limits.diagnoses(points)}[ws2.label]
    [fix] = [f for f in found.fixes if "AllReduce (16-32 MiB)" in f.action]
    step = limits.step_time(ws2)
    assert step is not None
    # time per rank: 20 x 2.0 ms and 20 x 2.2 ms, median 42 ms; busbw median 95 GB/s = 47.5 % of 200 GB/s
    assert fix.saves_ms == pytest.approx(42.0 / step.iterations * (1 - 95.0 / 200.0))
    assert "(16 MiB float32, NCCL's API, one CUDA graph of the calls)" in fix.action and "(now 47.50 %)" in fix.action
    assert any(re.match(r"AllReduce \(16-32 MiB\) 95(\.0+)? GB/s = 47\.50 % of the ceiling", said) for said in found.rates)


def test_a_host_bound_runs_first_screen_names_the_idle_cause_and_line(campaign: tuple[Path, str],
                                                                      tmp_path: Path) -> None:
    """A run whose nsys_idle_causes table (hpcprof.analysis.idle) names a slow dataset: the first screen's
    GPU idle part names the cause and its line, and its fix is the input pipeline's, bounded by that
    cause's share of the idle time (the Echo ws2 run, copied, given the table)."""
    import shutil

    from hpcprof.analysis import idle as I
    from hpcprof.report import limits, sweep
    from hpcprof.report.runs import load, select_runs
    from hpcprof.run.results import write_table

    workdir = tmp_path / "work"
    shutil.copytree(campaign[0], workdir, symlinks=True)
    points = sweep.sweep_points(load(select_runs((ECHO,), workdir), require_collected=True, one_workload=True), None)
    ws2 = max(points, key=lambda p: p.first.record.world_size)
    t = I.Timeline(rank=0, steps=(np.array([0.0]), np.array([1000.0])), busy=I.intervals([0], [400]),
                   host={"input": I.intervals([400], [850])}, sync_ops=I.intervals([], []),
                   sample_t=np.array([500.0, 600.0]), sample_at=["/src/data.py:41:__getitem__;/src/train.py:9:main"] * 2,
                   sample_in=["input", "input"])
    assert ws2.first.tool == "nsys"     # the run's own tool's table is the one read
    write_table(ws2.first.run.path, nt.IDLE_CAUSES.name, I.attribute([t]))   # input 450 of 600 µs idle: 75 %
    found = {d.point: d for d in limits.diagnoses(points)}[ws2.label]
    idle = next(p for p in found.parts if p.name == "GPU idle")
    assert "input 75.00 % at data.py:41 in __getitem__" in idle.detail
    [fix] = [f for f in found.fixes if f.action.startswith("input: ")]
    assert "num_workers" in fix.action and fix.saves_ms == pytest.approx(idle.ms * 0.75)
    done = hpcprof("report", ws2.first.run.run_id, workdir=workdir, env={**__import__("os").environ, "COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    block = " ".join(diagnosis_block(done.stdout))   # idle is not this run's limiter: its fix names the line
    assert "input: DataLoader(num_workers=N" in block and "the work at data.py:41 in __getitem__ out of the step" in block
