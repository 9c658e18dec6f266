"""The idle attribution (hpcprof.analysis.idle, its torch adapter and `hpcprof trace causes`): the
planted programs (benchmarks/gpu/idle_planted.py) run on the CPU under torch.profiler, armed as
the rank wrapper arms a rank (the step hook opens the window and samples the stack); each planted
cause is named with its time within 25 % of the program's own measurement, the control gets none,
and the parts add up to the idle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hpcprof_cli import hpcprof

from hpcprof.analysis import idle as I

REPO = Path(__file__).resolve().parents[1]
PLANTED = REPO / "benchmarks" / "gpu" / "idle_planted.py"


def test_interval_algebra() -> None:
    a = I.intervals([0, 5, 3, 20], [4, 8, 6, 20])              # [0,4) [3,6) [5,8) joined; an empty one dropped
    assert [list(x) for x in a] == [[0.0], [8.0]]
    b = I.intervals([2, 6], [3, 10])
    assert [list(x) for x in I.intersect(a, b)] == [[2.0, 6.0], [3.0, 8.0]]
    assert [list(x) for x in I.subtract(a, b)] == [[0.0, 3.0], [2.0, 6.0]]
    assert [list(x) for x in I.after(np.array([1.0, 9.0]), np.array([0.0, 4.0]))] == [[1.0], [4.0]]


def test_every_idle_us_has_one_cause_by_priority() -> None:
    """A step of 100 µs, busy 0-10, 80-82 and 90-100: input covers 10-40, sync 30-60 (input wins
    30-40), launch 55-70 (sync wins 55-60), a sample at 75 in the program's Python (70-80), no
    sample in 82-90."""
    t = I.Timeline(rank=3, steps=(np.array([0.0]), np.array([100.0])), busy=I.intervals([0, 80, 90], [10, 82, 100]),
                   host={"input": I.intervals([10], [40]), "sync": I.intervals([30], [60]),
                         "launch": I.intervals([55], [70])}, sync_ops=I.intervals([30], [31]),
                   sample_t=np.array([20.0, 75.0]), sample_at=["data.py:41:__getitem__;train.py:9:main", "train.py:12:main"],
                   sample_in=["input", ""])
    frame = I.attribute([t]).set_index("cause")
    us = frame["ms_per_step"] * 1000
    assert us.round(6).to_dict() == {"gc": 0, "input": 30, "sync": 20, "collective": 0, "compile": 0, "optimizer": 0,
                                     "launch": 10, "program": 10, "unattributed": 8}
    assert us.sum() == pytest.approx(frame["idle_ms"].iloc[0] * 1000) == 78
    assert frame.loc["input", "at"] == "data.py:41:__getitem__" and frame.loc["input", "via"] == "train.py:9:main"
    assert frame.loc["program", "at"] == "train.py:12:main" and frame.loc["unattributed", "at"] == ""
    assert "saves up to 0.0 ms/step" in frame.loc["input", "fix"] and "num_workers" in frame.loc["input", "fix"]
    assert list(I.named(I.attribute([t]))["cause"]) == ["input", "sync", "launch", "program"]


def planted(tmp_path: Path, cause: str, ms: float = 20.0) -> tuple[Path, dict[str, object]]:
    """Run a planted program under the step hook's torch.profiler window (steps 4-9)."""
    run_dir = tmp_path / cause
    (run_dir / "profiles").mkdir(parents=True)     # the rank wrapper makes the run's directories
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCPROF_")} | {
        "PYTHONPATH": str(REPO / "hpcprof" / "inject"), "HPCPROF_STEPS": "1", "HPCPROF_RUN_DIR": str(run_dir),
        "HPCPROF_RANK": "0", "HPCPROF_STEPS_DRIVE": "1", "HPCPROF_PROFILE_TOOL": "torch", "HPCPROF_STEPS_SKIP": "3",
        "HPCPROF_STEPS_COUNT": "6", "HPCPROF_PROFILE_DIR": str(run_dir / "profiles"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(PLANTED), cause, "--steps", "12", "--ms", str(ms),
                           "--out", str(tmp_path / f"{cause}.json")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return run_dir / "profiles" / "rank0.pt.trace.json", json.loads((tmp_path / f"{cause}.json").read_text())


@pytest.mark.slow
@pytest.mark.quiet     # the cause's time against the program's own: tests/run.sh runs it alone, after the rest
@pytest.mark.parametrize("cause", ["input", "sync"])
def test_planted_cause_is_named_with_its_time_and_line(tmp_path: Path, cause: str) -> None:
    pytest.importorskip("torch")
    from hpcprof.tools.torch.analysis.idle import timeline

    trace, own = planted(tmp_path, cause)
    frame = I.attribute([timeline(trace)])
    assert frame["ms_per_step"].sum() == pytest.approx(frame["idle_ms"].iloc[0])   # the parts add up
    top = I.named(frame).iloc[0]
    assert top["cause"] == cause
    assert top["ms_per_step"] == pytest.approx(own["ms_per_step"], rel=0.25), (top.to_dict(), own)
    assert (I.named(frame)["ms_per_step"].iloc[1:] < top["ms_per_step"] / 4).all(), I.named(frame)
    if cause == "input":   # the dataset's __getitem__ (the planted line), or, where the samples fell in the
        # DataLoader's own fetching and collation, the step's call into it (next(loader)), as on the GPU
        frames = [f for f in (top["at"], top["via"]) if ":__getitem__" in f]
        source = PLANTED.read_text().splitlines()
        if frames:
            assert frames[0].startswith(str(PLANTED)), top.to_dict()
            assert abs(int(frames[0].split(":")[-2]) - int(str(own["line"]).split(":")[1])) <= 1
        else:
            assert top["at"].startswith(str(PLANTED)), top.to_dict()
            assert "next(loader)" in source[int(top["at"].split(":")[-2]) - 1], top.to_dict()
    else:                  # the host work after the item(): the program's own file
        assert top["at"].startswith(str(PLANTED)) and "aten::item x1/step" in top["detail"], top.to_dict()


@pytest.mark.slow
@pytest.mark.quiet     # no cause above 5 % of the step: the load's delays would be one
def test_control_gets_no_cause_and_the_cli_says_so(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from hpcprof.tools.torch.analysis.idle import timeline

    trace, own = planted(tmp_path, "control")
    assert own["cause"] is None
    frame = I.attribute([timeline(trace)])
    assert I.named(frame).empty, frame
    assert frame["pct_of_step"].sum() < I.NAMED_PCT_OF_STEP * 2
    out = hpcprof("trace", "causes", str(trace), "--format", "csv", "--all-causes", env={"PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert [line.split(",")[4] for line in out.stdout.splitlines()[1:]] == list(I.CAUSES)


GPU = Path(__file__).parent / "fixtures" / "idle_gpu"


@pytest.mark.parametrize("cause", ["input", "sync", "launch", "control"])
def test_planted_programs_on_the_gpu(cause: str) -> None:
    """The planted programs' torch.profiler traces and stack samples from one H200 (fixtures/idle_gpu,
    made by benchmarks/gpu/idle_planted.sh): each cause named first, within 25 % of the program's own
    measurement, at its line; the control gets no cause."""
    from hpcprof.tools.torch.analysis.idle import timeline

    folder = GPU / f"torch-{cause}"
    own = json.loads((folder / "own.json").read_text())
    frame = I.attribute([timeline(folder / "profiles" / "rank0.pt.trace.json.gz")])
    assert frame["ms_per_step"].sum() == pytest.approx(frame["idle_ms"].iloc[0])
    found = I.named(frame)
    if cause == "control":
        assert own["cause"] is None and found.empty, found
        return
    top = found.iloc[0]
    assert top["cause"] == cause and len(found) == 1, found
    assert top["ms_per_step"] == pytest.approx(own["ms_per_step"], rel=0.25)
    source = PLANTED.read_text().splitlines()
    planted_line = int(str(own["line"]).split(":")[1])
    at_line = int(top["at"].split(":")[-2])
    assert top["at"].rsplit(":", 2)[0].endswith("benchmarks/gpu/idle_planted.py")
    if cause == "input":     # the step's call into the DataLoader (the samples fell in its collation)
        assert "next(loader)" in source[at_line - 1] or top["at"].endswith(":__getitem__"), top["at"]
    elif cause == "sync":    # the host work right after the planted .item()
        via_line = int(top["via"].split(":")[-2])
        assert 0 < via_line - planted_line <= 2 and "aten::item x1/step" in top["detail"], top.to_dict()
    else:                    # the tiny ops' line itself; the kernels per step and the launch against the kernel
        assert at_line == planted_line
        # the 600 tiny kernels and the 9 of the step's Linear forward, backward and SGD step (9 a step in
        # the input and sync programs' traces too)
        assert top["detail"].startswith(f"{own['kernels_per_step'] + 9} kernels a step"), top["detail"]


@pytest.mark.parametrize("cause", ["input", "sync", "launch", "control"])
def test_planted_programs_under_nsys(cause: str, tmp_path: Path) -> None:
    """The same programs under nsys (fixtures/idle_gpu/nsys-*: the export trimmed to the tables the
    attribution reads): the causes from the runtime calls and the stack samples (nsys sees no
    DataLoader annotation: the samples name the input), within 25 % of the program's own time; the
    control gets none; `hpcprof nsys causes` says the same."""
    import lzma

    from hpcprof.tools.nsys.analysis.idle import timeline

    folder = GPU / f"nsys-{cause}"
    export = tmp_path / "rank0.sqlite"
    export.write_bytes(lzma.decompress((folder / "profiles" / "rank0.sqlite.xz").read_bytes()))
    own = json.loads((folder / "own.json").read_text())
    frame = I.attribute([timeline(export, 0, folder / "samples" / "rank0.jsonl")])
    assert frame["ms_per_step"].sum() == pytest.approx(frame["idle_ms"].iloc[0])
    found = I.named(frame)
    if cause == "control":
        assert found.empty, found
        return
    assert list(found["cause"]) == [cause]
    assert found["ms_per_step"].iloc[0] == pytest.approx(own["ms_per_step"], rel=0.25)
    at = found["at"].iloc[0]
    expected = {"input": ":__getitem__", "sync": ":host_work", "launch": f":{own['line'].split(':')[1]}:run"}[cause]
    assert at.rsplit(":", 2)[0].endswith("idle_planted.py") and expected in at, at
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "rank0.jsonl").write_bytes((folder / "samples" / "rank0.jsonl").read_bytes())
    out = hpcprof("nsys", "causes", str(export), "--format", "csv", env={"PYTHONPATH": str(REPO)})
    assert out.returncode == 0 and out.stdout.splitlines()[1].split(",")[4] == cause, out.stdout + out.stderr
    # collect's tables of the export (the run's samples found beside it): the same causes, the
    # headline's idle.<cause>, and the typical step's idle mostly under the cause
    from hpcprof.analysis.summary import idle_cause_metrics
    from hpcprof.tools.nsys.analysis.collect import idle_tables

    tables = {name: table.to_pandas() for name, table in idle_tables(export, 0).items()}
    pd.testing.assert_frame_equal(tables["idle_causes"], frame)
    metrics = {name: value for name, value, _ in idle_cause_metrics(tables["idle_causes"])}
    assert metrics[f"idle.{cause}"] == pytest.approx(found["ms_per_step"].iloc[0])
    step = tables["step_idle"]
    idle = step[step["kind"] == "idle"]
    by_cause = (idle["end_ms"] - idle["start_ms"]).groupby(idle["range"].str.split().str[1]).sum()
    assert by_cause.idxmax() == cause, by_cause


def test_each_cause_is_a_headline_metric_that_compare_reads(tmp_path: Path) -> None:
    """collect's torch_idle_causes of the planted input program (H200) give `idle.<cause>`, ms per
    step, the metric compare and the store read like any other: input at the table's time."""
    from hpcprof.analysis.summary import tables_of
    from hpcprof.core import catalog as c
    from hpcprof.run.results import write_table
    from hpcprof.tools.torch import tables as tt
    from hpcprof.tools.torch.analysis.collect import analyse_file
    from hpcprof.tools.torch.analysis.headline import torch_metrics

    run = tmp_path / "run"
    for name, df in analyse_file(GPU / "torch-input" / "profiles" / "rank0.pt.trace.json.gz", 0).items():
        write_table(run, f"torch_{name}", df)
    causes = tables_of(run)(tt.IDLE_CAUSES.name)
    assert causes is not None
    metrics = {name: value for name, value, _ in torch_metrics(tables_of(run))}
    by_cause = causes.set_index("cause")["ms_per_step"]
    assert metrics["idle.input"] == pytest.approx(by_cause["input"]) and metrics["idle.input"] > 10
    assert {m.removeprefix("idle.") for m in metrics if c.declared(m) is c.IDLE_CAUSE} == set(by_cause[by_cause > 0].index)


def test_the_launch_evidence_holds_htas_queue_length() -> None:
    """The launch cause's detail carries HTA's queue length (get_queue_length_summary, differential-tested
    in tests/test_trace_differential.py) of the busiest stream: about empty in the H200 launch-bound
    program (its 609 tiny kernels), over a hundred kernels deep in the compute-bound control."""
    from hpcprof.tools.torch.analysis.analyses import queue_length_summary
    from hpcprof.tools.torch.analysis.idle import add_queue_length, timeline
    from hpcprof.tools.torch.analysis.load import load_trace

    medians = {}
    for cause in ("launch", "control"):
        path = GPU / f"torch-{cause}" / "profiles" / "rank0.pt.trace.json.gz"
        found, trace = timeline(path), load_trace(path, 0)
        add_queue_length(found, trace)
        frame = I.attribute([found])
        detail = frame.loc[frame["cause"] == "launch", "detail"].iloc[0]
        summary = queue_length_summary([trace])
        busiest = summary.loc[summary["count"].idxmax()]
        assert detail.endswith(f"queue length median {busiest['50%']:.3g} (HTA's, stream {int(busiest['stream'])}, "
                               "whole trace)"), detail
        medians[cause] = float(busiest["50%"])
    assert medians["launch"] < 1 < 100 < medians["control"], medians


def test_the_typical_step_shows_each_idle_gap_under_its_cause_and_line() -> None:
    """The H200 planted input program's median step (collect's torch_step_idle, the HTML's figure):
    the device's busy intervals and the idle gaps under their causes tile the step without overlap,
    and the largest gap is the input wait labelled with the program's line."""
    from hpcprof.report import plots
    from hpcprof.tools.torch.analysis.collect import analyse_file

    step = analyse_file(GPU / "torch-input" / "profiles" / "rank0.pt.trace.json.gz", 0)["step_idle"]
    assert set(step["kind"]) == {"device", "idle"} and step["rank"].unique().tolist() == [0]
    ordered = step.sort_values("start_ms")
    assert (ordered["start_ms"].to_numpy()[1:] >= ordered["end_ms"].to_numpy()[:-1] - 1e-9).all()   # no overlap
    own = json.loads((GPU / "torch-input" / "own.json").read_text())
    widest = step.loc[(step["end_ms"] - step["start_ms"]).idxmax()]
    assert widest["range"].startswith("idle: input at idle_planted.py:")
    assert (widest["end_ms"] - widest["start_ms"]) == pytest.approx(own["ms_per_step"], rel=0.25)
    figure = plots.gantt(step, "one step")
    assert {trace.name for trace in figure.data} >= {"device busy"}


def test_one_split_serves_the_causes_and_the_typical_step() -> None:
    """`split` once, then attribute and typical_step from it: the same tables as each splitting the
    timeline itself; the causes' parts are the idle of the step and their lines the causes' lines."""
    t = I.Timeline(rank=1, steps=(np.array([0.0, 100.0, 250.0]), np.array([100.0, 250.0, 350.0])),
                   busy=I.intervals([0, 80, 120, 300], [40, 100, 200, 340]),
                   host={"input": I.intervals([40, 200], [70, 240]), "launch": I.intervals([65, 240], [80, 300])},
                   sync_ops=I.intervals([], []), sample_t=np.array([50.0, 210.0, 345.0]),
                   sample_at=["data.py:41:__getitem__;train.py:9:main"] * 2 + ["train.py:12:main"],
                   sample_in=["input", "input", ""])
    cut = I.split(t)
    assert list(cut.parts) == list(I.CAUSES)
    assert sum(I.length(p) for p in cut.parts.values()) == 350 - (40 + 20 + 80 + 40)    # the window less the busy
    assert cut.lines["input"] == ("data.py:41:__getitem__", "train.py:9:main")
    pd.testing.assert_frame_equal(I.attribute([t], [cut]), I.attribute([t]))
    pd.testing.assert_frame_equal(I.typical_step([t], [cut]), I.typical_step([t]))
    with pytest.raises(ValueError, match="1 splits for 2 timelines"):
        I.attribute([t, t], [cut])


@pytest.mark.parametrize("cause", ["input", "launch"])
def test_collect_reads_the_idle_from_the_export_it_opened(cause: str, tmp_path: Path) -> None:
    """collect's idle tables of an export it has open, the device's busy time from the GPU
    operations it has read, are those of the export file read on its own (samples found beside it)."""
    import lzma

    from hpcprof.tools.nsys.analysis.collect import idle_tables, load_activity
    from hpcprof.tools.nsys.stats.db import Export

    folder = GPU / f"nsys-{cause}"
    export = tmp_path / "profiles" / "rank0.sqlite"
    export.parent.mkdir()
    export.write_bytes(lzma.decompress((folder / "profiles" / "rank0.sqlite.xz").read_bytes()))
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "rank0.jsonl").write_bytes((folder / "samples" / "rank0.jsonl").read_bytes())
    alone = idle_tables(export, 0)
    with Export(export) as opened:
        reused = idle_tables(export, 0, (opened, load_activity([opened], {str(export): 0})))
    assert alone["lines"].num_rows and alone["step_idle"].num_rows and alone.keys() == reused.keys()
    assert all(reused[name].equals(alone[name]) for name in alone)
