"""A sweep over world size explained, end to end on CPU: tests/data/dp_scaling_cpu.yaml (the gloo DDP
trainer at 1, 2 and 4 ranks under torch.profiler, rank 3 sleeping 30 ms a step at 4 ranks) through
submit, collect and report; FSDP2 (`fully_shard`) on 2 gloo ranks, its all-gathers and
reduce-scatters matched across ranks; the scaling view's arithmetic by hand: its step the median (H200
seqpar runs, one with a planted slow first iteration), the exposed transfer and the split of the lost
time on a planted two-rank schedule."""

from __future__ import annotations

import io
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hpcprof_cli import hpcprof
from test_timeline import SCHEMA

from hpcprof.report.scaling import NOT_STATED, PROFILED, sentences

REPO = Path(__file__).resolve().parent.parent
TRAINER = str(REPO / "examples" / "dp_trainer.py")
LATE_MS = 30.0


def _argv(steps: int, *extra: str) -> str:
    return "workload.argv=" + json.dumps([sys.executable, TRAINER, "--steps", str(steps), "--dim", "32", "--layers", "2",
                                          "--batch", "32", "--device", "cpu", *extra])


@pytest.mark.slow
@pytest.mark.quiet     # the late rank's delay against the planted one: run alone, after the rest
def test_cpu_sweep_gives_efficiency_per_point_and_names_the_late_rank(tmp_path: Path) -> None:
    """The report's scaling view: one row per world size with its efficiency against 1 rank (checked
    against the step times `compare` gives, T_1 / T_N: weak scaling as the example states), and at 4
    ranks rank 3 named as the late rank with a cost within 40 % of the 30 ms it sleeps, and where it
    spends its step instead: the sleep's line, for about as long (the stack samples)."""
    import jsonschema  # here, not at collection: its format checkers build a grammar at import

    exp = REPO / "tests" / "data" / "dp_scaling_cpu.yaml"
    hpcprof("submit", str(exp), "--site", "local", "--wait", "--set",
            _argv(18, "--late-rank", "3", "--late-ms", str(LATE_MS)), cwd=tmp_path, check=True, timeout=240)
    hpcprof("collect", cwd=tmp_path, check=True, timeout=240)
    said = hpcprof("report", cwd=tmp_path, check=True, env={"COLUMNS": "250"}).stdout
    table = said[said.index(" scaling "):]
    rows = {int(m.group(1)): (float(m.group(2)), float(m.group(3)), float(m.group(4))) for m in re.finditer(
        r"│ ranks_per_n\S* *│ (\d) *│ weak *│ ([\d.e+-]+) *│ unprofiled *│ ([\d.e+-]+) *│ ([\d.e+-]+) *│", table)}
    assert sorted(rows) == [1, 2, 4] and rows[1][2] == 100
    assert "rank 3 is late in" in " ".join(hpcprof("compare", cwd=tmp_path, check=True).stdout.split())
    # the program's step, not the profiler's: every point timed its steps outside the profiler's window
    # (18 steps, the window's 6 after 4 skipped), and the efficiency is theirs
    compared = pd.read_csv(io.StringIO(hpcprof("compare", "--format", "csv", cwd=tmp_path, check=True).stdout))
    step = dict(zip(compared["world_size"], compared["profiler.unprofiled_step [ms]"], strict=True))
    profiled = dict(zip(compared["world_size"], compared["iteration.median [ms]"], strict=True))
    for world, (ms, profiler, eff) in rows.items():
        assert ms == pytest.approx(step[world], rel=5e-3)      # 3 significant digits
        assert profiler == pytest.approx(profiled[world] - step[world], rel=5e-3, abs=5e-3)
        assert eff == pytest.approx(100 * step[1] / step[world], rel=5e-3)
    found = re.search(r"4 ranks against .*?rank (\d) is late in (\d+) of (\d+) steps: it delays a step by ([\d.]+) ms",
                      " ".join(table.split()))
    assert found is not None, table
    rank, late, steps, cost = int(found.group(1)), int(found.group(2)), int(found.group(3)), float(found.group(4))
    assert rank == 3 and late >= steps - 1 and abs(cost - LATE_MS) <= 0.4 * LATE_MS, found.group(0)
    # where rank 3 spends its step instead: the planted sleep's line, about as long as it sleeps
    doing = re.search(r"rank 3 spends ([\d.]+) ms a step more than the others at (\S+) in", " ".join(table.split()))
    assert doing is not None, table
    sleep = next(n for n, line in enumerate(Path(TRAINER).read_text().splitlines(), 1) if "time.sleep(args.late_ms" in line)
    assert doing.group(2) == f"dp_trainer.py:{sleep}" and abs(float(doing.group(1)) - LATE_MS) <= 0.4 * LATE_MS
    # the 4-rank run's merged timeline: a Chrome trace with a process per rank, the waits for rank 3
    many = hpcprof("report", "--timeline", str(tmp_path / "all.json"), cwd=tmp_path)
    assert many.returncode == 2 and "--timeline: name one run (3 selected)" in many.stderr
    [run] = (tmp_path / "hpcprof-runs" / "dp-scaling-cpu").glob("*-p002")
    hpcprof("report", run.name, "--timeline", str(tmp_path / "t.json"), cwd=tmp_path, check=True)
    doc = json.loads((tmp_path / "t.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    assert {e["pid"] for e in doc["traceEvents"] if e["name"] == "process_name"} == {0, 1, 2, 3}
    waited = {e["pid"]: 0.0 for e in doc["traceEvents"]}
    for e in doc["traceEvents"]:
        if e.get("cat") == "wait":
            waited[e["pid"]] += e["dur"]
    assert waited[3] == min(waited.values())


@pytest.mark.slow
def test_fsdp2_on_two_gloo_ranks_all_gathers_and_reduce_scatters(tmp_path: Path) -> None:
    """FSDP2 (fully_shard per block) on CPU with gloo: the trainer completes on 2 ranks, and its
    collectives, matched across ranks with their transfer/wait split, are FSDP2's all-gathers
    (parameters, forward and backward) and gradient reductions, as many as its units say."""
    exp = tmp_path / "fsdp.yaml"
    exp.write_text("name: fsdp\nworkload: {kind: command, argv: [python]}\nresources: {nodes: 1, ranks_per_node: 2}\n"
                   "profile: {tool: torch, window: {skip_steps: 2, steps: 4}}\n")
    hpcprof("submit", str(exp), "--site", "local", "--wait", "--set", _argv(10, "--strategy", "fsdp"),
            cwd=tmp_path, check=True, timeout=240)
    [run] = (tmp_path / "hpcprof-runs" / "fsdp").iterdir()
    assert "fsdp world=2" in (run / "logs" / "rank0.log").read_text()
    waits = pd.read_csv(io.StringIO(hpcprof("trace", "critical-path", "--waits", str(run / "profiles" / "torch"),
                                            "--format", "csv", check=True).stdout))
    every = waits[waits["scope"] == "all"].set_index("collective")
    trace = json.loads(next((run / "profiles" / "torch").glob("rank0.*.json")).read_text())
    steps = sum(str(e.get("name", "")).startswith("ProfilerStep#") for e in trace["traceEvents"])
    # per step, 3 FSDP units (2 blocks and the root): an all-gather of each in forward, of the 2 blocks
    # again in backward (FSDP2 reshards them after forward, not the root), and one gradient reduction
    # per unit: an all-reduce on gloo, which has no reduce-scatter (a ReduceScatter on NCCL)
    assert every["instances"].to_dict() == {"AllGather": 5 * steps, "AllReduce": 3 * steps} and steps >= 4
    assert (every["ranks"] == 2).all() and (every["kernel_ns"] >= every["transfer_ns"]).all()


def _row(**over: object) -> dict:
    """A scaling row as with_lost_time makes it (the sentences' input), `over` replacing its values."""
    row = {"group": "all", "point": "ranks=4", "reference": "ranks=1", "world_size": 4, "time_ms": 20.0,
           "tool": "torch", "profiled_ms": 20.0, "program_ms": float("nan"), "timed": PROFILED,
           "profiler_ms": float("nan"),
           "speedup": 0.5, "ideal": 4.0, "mode": NOT_STATED, "efficiency_pct": 12.5, "efficiency_weak_pct": 50.0,
           "efficiency_strong_pct": 12.5, "lost_ms": 10.0, "late_ms": 6.0, "exposed_ms": 3.0, "overlapped_ms": 1.0,
           "transfer_by_collective": "AllReduce 3 ms exposed, 1 ms overlapped", "other_ms": 1.0, "gained_ms": 0.0,
           "straggler": "rank 3 is late in 6 of 6 steps"}
    return row | over


def test_the_sentences_say_both_efficiencies_where_the_mode_is_not_stated() -> None:
    [said] = sentences(pd.DataFrame([_row(), _row(point="ranks=1", world_size=1)]).iloc[[0]])
    assert said == ("all: 4 ranks against ranks=1: speed-up 0.50x (ideal 4.00x), parallel efficiency 50 % if weak, "
                    f"12 % if strong ({NOT_STATED}); median step 20 ms (counted steps, profiled: the profiler's slowdown "
                    "in it, no unprofiled step at any point), lost 10 ms a step (against "
                    "the weak ideal): 6 ms waiting for late ranks, 3 ms exposed collective transfer (AllReduce 3 ms "
                    "exposed, 1 ms overlapped), 1 ms other. rank 3 is late in 6 of 6 steps.")


def test_work_faster_than_at_the_reference_and_a_super_linear_point_are_said_so() -> None:
    """Late ranks and exposed transfer above the time lost: no negative "other", but the ranks' own work
    ran faster than at the reference, by the difference; a point faster than its ideal (lost < 0) is
    called super-linear, its measured parts given, no negative split."""
    [faster] = sentences(pd.DataFrame([_row(mode="weak", efficiency_pct=80.0, lost_ms=2.0, late_ms=1.5,
                                            exposed_ms=1.0, other_ms=0.0, gained_ms=0.5)]))
    assert ("lost 2 ms a step, less than its 1.5 ms waiting for late ranks, 1 ms exposed collective transfer "
            "(AllReduce 3 ms exposed, 1 ms overlapped): the ranks' own work ran 0.5 ms a step faster than at "
            "ranks=1, nothing else lost.") in faster
    [superlinear] = sentences(pd.DataFrame([_row(mode="weak", efficiency_pct=121.0, lost_ms=-1.14, late_ms=3.14,
                                                 exposed_ms=0.0226, other_ms=0.0, gained_ms=4.3026)]))
    assert ("super-linear: 1.14 ms a step faster than its ideal, with 3.14 ms waiting for late ranks, 0.0226 ms "
            "exposed collective transfer (AllReduce 3 ms exposed, 1 ms overlapped): the ranks' own work ran 4.3 ms "
            "a step faster than at ranks=1.") in superlinear and not re.search(r"-\d", superlinear)


def test_the_kernels_slowdown_is_said_where_echo_measured_it() -> None:
    """A point whose run has Echo's slowdown (slowdown.median: its kernels against world size 1) says
    how much longer its compute kernels last; a point without it says nothing of kernels."""
    row = _row(point="ranks=2", world_size=2, time_ms=10.0, speedup=1.6, ideal=2.0, mode="weak", efficiency_pct=80.0,
               kernel_slowdown=0.218)
    [said] = sentences(pd.DataFrame([row]))
    assert said.endswith(" Its compute kernels last +22 % against one GPU (Echo's median per-kernel slowdown, "
                         "the whole capture).")
    [plain] = sentences(pd.DataFrame([row | {"kernel_slowdown": float("nan")}]))
    assert "kernels last" not in plain


MS = 1_000_000
#: the planted schedule of two ranks (ms from each step's start): rank 0 computes 4 ms, rank 1 6 ms, then
#: an all-reduce that ends 2 ms after rank 1 arrives (transfer 2 ms; rank 0 waits 2 ms in it); rank 0's
#: `bwd` kernel runs 5-7.5 (1 ms of its wait, 1.5 ms of the transfer), rank 1's 6-8 (the whole transfer);
#: then an all-gather 8.5-9.5 on both (transfer 1 ms, no wait) under an `opt` kernel 8.2-10 on both
PLAN = {0: [("fwd", 0.0, 4.0, None), ("bwd", 5.0, 7.5, None), ("AllReduce", 4.0, 8.0, "AllReduce"),
            ("opt", 8.2, 10.0, None), ("AllGather", 8.5, 9.5, "AllGather")],
        1: [("fwd", 0.0, 6.0, None), ("bwd", 6.0, 8.0, None), ("AllReduce", 6.0, 8.0, "AllReduce"),
            ("opt", 8.2, 10.0, None), ("AllGather", 8.5, 9.5, "AllGather")]}
STEPS = 4


def planted_events() -> pd.DataFrame:
    """The planted schedule's critical-path events, STEPS steps of 10.5 ms, made from its operations by
    the analysis collect runs (critical_path.rank_events)."""
    from hpcprof.analysis.critical_path import rank_events

    parts = []
    for rank, plan in PLAN.items():
        t0 = [1_000 * MS + step * 10_500_000 for step in range(STEPS)]
        rows = [(t + int(a * MS), t + int(b * MS), name, kind) for t in t0 for name, a, b, kind in plan]
        ops = {"start": np.array([r[0] for r in rows]), "end": np.array([r[1] for r in rows]),
               "launch": np.array([r[0] - 10_000 for r in rows]), "stream": np.array([13 if r[3] else 7 for r in rows]),
               "name": np.array([r[2] for r in rows], dtype=object), "collective": np.array([r[3] for r in rows],
                                                                                          dtype=object)}
        its = {"number": np.arange(STEPS), "start": np.array(t0) - 100_000, "end": np.array(t0) + 10 * MS}
        parts.append(rank_events(rank, ops, its, {"name": np.array([], dtype=object), "start": np.array([], dtype=int),
                                                  "end": np.array([], dtype=int)}))
    return pd.concat(parts, ignore_index=True)


def test_only_the_transfer_no_compute_overlapped_is_exposed() -> None:
    """Each collective's exposed transfer is the part of its last `transfer` ns no other work of the rank
    ran in, by hand: the all-reduce's 2 ms transfer is 0.5 ms exposed on rank 0 (its `bwd` covers 1.5 ms
    of it; the 1 ms it covers of the wait before it does not count) and 0 on rank 1, a mean of 0.25 ms;
    the all-gather under `opt` is not exposed at all."""
    from hpcprof.analysis.collective_wait import transfer_wait

    events = planted_events()
    assert set(events["kind"]) == {"compute", "collective", "end", "overlap"}
    waits = transfer_wait(events)
    every = waits[waits["scope"] == "all"].set_index("collective")
    assert every.loc["AllReduce", ["instances", "transfer_ns", "wait_ns", "exposed_ns"]].tolist() == \
        [STEPS, 2 * MS, 1 * MS, 0.25 * MS]                     # wait: rank 0's 2 ms, rank 1's 0, a mean of 1
    assert every.loc["AllGather", ["transfer_ns", "exposed_ns"]].tolist() == [1 * MS, 0.0]
    ranks = waits[(waits["scope"] == "rank") & (waits["collective"] == "AllReduce")].set_index("rank")
    assert ranks["exposed_ns"].to_dict() == {0: STEPS * 0.5 * MS, 1: 0.0}


def test_the_lost_time_splits_into_parts_that_add_up_none_negative() -> None:
    """The planted 2-rank schedule against a 1-rank step of 7 ms (weak): lost 10.5 - 7 = 3.5 ms a step =
    2 ms late (rank 1's longer compute) + 0.25 ms exposed transfer + 1.25 ms other; the transfer the
    kernels hid (1.75 + 1 ms) is shown apart, not taken from the rest (which counted in full, as 3 ms of
    transfer, left -1.5 ms "other"). Against a 1-rank step of 9 ms, lost 1.5 ms is less than late and
    exposed: other 0, the ranks' own work 0.75 ms faster; against 11 ms, super-linear (lost -0.5)."""
    from hpcprof.report.scaling import split_of, with_lost_time

    split = split_of(planted_events())
    assert split["late_rank"] == 1 and split["late_ms"] == pytest.approx(2.0)
    assert split["transfer"] == {"AllGather": (0.0, 1.0), "AllReduce": (0.25, 1.75)}
    step = 10.5           # each planted step's span: every step starts 10.5 ms after the one before
    for one_rank, lost, other, gained in ((7.0, 3.5, 1.25, 0.0), (9.0, 1.5, 0.0, 0.75), (11.0, -0.5, 0.0, 2.75)):
        rows = pd.DataFrame({"group": "all", "point": ["ranks=1", "ranks=2"], "world_size": [1, 2],
                             "time_ms": [one_rank, step], "mode": "weak", "kernel_slowdown": float("nan")})
        out = with_lost_time(rows, [{}, split]).iloc[1]
        assert out["lost_ms"] == pytest.approx(lost) and out["other_ms"] == pytest.approx(other)
        assert out["gained_ms"] == pytest.approx(gained) and out["exposed_ms"] == pytest.approx(0.25)
        assert out["overlapped_ms"] == pytest.approx(2.75) and out["late_ms"] == pytest.approx(2.0)
        assert out["late_ms"] + out["exposed_ms"] + out["other_ms"] - out["gained_ms"] == pytest.approx(lost)
        assert min(out["other_ms"], out["gained_ms"], out["exposed_ms"], out["overlapped_ms"]) >= 0


def test_the_step_is_the_median_a_slow_first_step_does_not_move(repo: Path, gpu_data: Path, tmp_path: Path) -> None:
    """H200 seqpar at 1 and 2 ranks (tests/fixtures/gpu run1, tool none), the 2-rank run's first timed
    iteration planted 2.4 s slower on both ranks (a profiler's start-up in the loop): collected and
    reported, the view's step is each point's median iteration (computed here from the workload's own
    rows), the strong efficiency T1 / (2 T2) from those medians, as the table's heading says."""
    from test_report_html import gpu_sweep

    from hpcprof.report import sweep
    from hpcprof.report.runs import load, select_runs

    data = tmp_path / "data"
    medians = {}
    for ranks in (1, 2):
        name = f"base_float32_p{ranks}"
        doc = json.loads((gpu_data / "run1" / "seqpar" / name / "seqpar.json").read_text())
        if ranks == 2:
            for row in doc["iterations"]:
                row["time_ms"] += 2400.0 if row["iteration"] == 0 and row["phase"] == "iteration" else 0.0
        steps = [r["time_ms"] for r in doc["iterations"] if r["phase"] == "iteration"]
        medians[ranks] = statistics.median(steps)
        assert ranks == 1 or statistics.mean(steps) > medians[ranks] + 20      # the plant moves the mean
        (data / name).mkdir(parents=True)
        (data / name / "seqpar.json").write_text(json.dumps(doc))
    work = gpu_sweep(repo, data, tmp_path, "{resources.ranks_per_node: [1, 2]}", 1,
                     ["base_float32_p1", "base_float32_p2"], "20261129-000000-5ca1e0")
    infos = load(select_runs(("20261129-000000-5ca1e0",), work), require_collected=True)
    df = sweep.scaling(sweep.sweep_points(infos, None)).set_index("world_size")
    assert df["time_ms"].to_dict() == pytest.approx(medians)
    assert df.loc[2, "efficiency_pct"] == pytest.approx(100 * medians[1] / (2 * medians[2]))
    assert df.loc[2, "mode"] == "strong" and df.loc[2, "efficiency_pct"] > 90
    table, said = sweep.scaling_view(infos)
    assert "step ms (median)" in table.columns and f"median step {medians[2]:.3g} ms (counted steps, no profiler ran)" in said[0]


def test_the_step_is_the_programs_where_every_point_timed_it_without_the_profiler() -> None:
    """FSDP2 on 2 H200 (benchmarks/results/scaling_gpu.txt, third run), weak: profiled median steps 27.6
    and 37.0 ms, the same runs' unprofiled steps 26.4 and 30.4 ms, 3.31 ms exposed transfer at 2 ranks.
    On the unprofiled basis the efficiency is 26.4 / 30.4 = 86.8 %, not 27.6 / 37.0 = 74.6 %; the lost
    4.0 ms is 3.31 exposed + 0.69 other, the profiler's 6.6 ms a step left out. Where one point has no
    unprofiled step, every point of the group keeps its profiled step, and the sentence names it."""
    from hpcprof.report.scaling import UNPROFILED, on_one_basis, with_lost_time

    split = {"late_rank": None, "late_ms": 0.0, "transfer": {"AllGather": (3.31, 1.0)}, "straggler": "no rank late"}
    rows = pd.DataFrame({"group": "all", "point": ["ranks=1", "ranks=2"], "reference": "ranks=1", "world_size": [1, 2],
                         "tool": "torch", "profiled_ms": [27.6, 37.0], "program_ms": [26.4, 30.4], "mode": "weak",
                         "kernel_slowdown": float("nan"), "speedup": [1.0, 2 * 26.4 / 30.4], "ideal": [1.0, 2.0]})
    out = with_lost_time(on_one_basis(rows), [{}, split]).assign(efficiency_pct=lambda d: d["efficiency_weak_pct"])
    two = out.iloc[1]
    assert (out["timed"] == UNPROFILED).all() and two["efficiency_weak_pct"] == pytest.approx(100 * 26.4 / 30.4)
    assert two["lost_ms"] == pytest.approx(4.0) and two["exposed_ms"] == pytest.approx(3.31)
    assert two["other_ms"] == pytest.approx(0.69) and two["profiler_ms"] == pytest.approx(6.6)
    [said] = sentences(out)
    assert ("median step 30.4 ms without the profiler (counted steps; profiled 37 ms: the profiler's 6.6 ms a step "
            "left out), lost 4 ms a step: 0 ms waiting for late ranks, 3.31 ms exposed") in said
    mixed = with_lost_time(on_one_basis(rows.assign(program_ms=[26.4, float("nan")])), [{}, split]).assign(
        efficiency_pct=lambda d: d["efficiency_weak_pct"])
    assert mixed.iloc[1]["efficiency_weak_pct"] == pytest.approx(100 * 27.6 / 37.0)
    assert mixed["profiler_ms"].isna().all() and mixed.iloc[1]["other_ms"] == pytest.approx(37.0 - 27.6 - 3.31)
    [said] = sentences(mixed)
    assert "median step 37 ms (counted steps, profiled: the profiler's slowdown in it, no unprofiled step at ranks=2)" in said
