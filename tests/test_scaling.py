"""A sweep over world size explained, end to end on CPU: tests/data/dp_scaling_cpu.yaml (the gloo DDP
trainer at 1, 2 and 4 ranks under torch.profiler, rank 3 sleeping 30 ms a step at 4 ranks) through
submit, collect and report; FSDP2 (`fully_shard`) on 2 gloo ranks, its all-gathers and
reduce-scatters matched across ranks; the scaling view's arithmetic by hand."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from hpcprof_cli import hpcprof
from test_timeline import SCHEMA

from hpcprof.report.scaling import NOT_STATED, sentences

REPO = Path(__file__).resolve().parent.parent
TRAINER = str(REPO / "examples" / "dp_trainer.py")
LATE_MS = 30.0


def _argv(*extra: str) -> str:
    return "workload.argv=" + json.dumps([sys.executable, TRAINER, "--steps", "10", "--dim", "32", "--layers", "2",
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
            _argv("--late-rank", "3", "--late-ms", str(LATE_MS)), cwd=tmp_path, check=True, timeout=240)
    hpcprof("collect", cwd=tmp_path, check=True, timeout=240)
    said = hpcprof("report", cwd=tmp_path, check=True, env={"COLUMNS": "250"}).stdout
    table = said[said.index(" scaling "):]
    rows = {int(m.group(1)): float(m.group(2)) for m in re.finditer(
        r"│ ranks_per_node=(\d) *│ \d *│ weak *│ [\d.e+-]+ *│ ([\d.e+-]+) *│", table)}
    assert sorted(rows) == [1, 2, 4] and rows[1] == 100
    assert "rank 3 is late in" in " ".join(hpcprof("compare", cwd=tmp_path, check=True).stdout.split())
    compared = pd.read_csv(io.StringIO(hpcprof("compare", "--format", "csv", cwd=tmp_path, check=True).stdout))
    step = dict(zip(compared["world_size"], compared["iteration.mean [ms]"], strict=True))
    for world, eff in rows.items():
        assert eff == pytest.approx(100 * step[1] / step[world], rel=5e-3)      # 3 significant digits
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
    hpcprof("submit", str(exp), "--site", "local", "--wait", "--set", _argv("--strategy", "fsdp"),
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


def test_the_sentences_say_both_efficiencies_where_the_mode_is_not_stated() -> None:
    row = {"group": "all", "point": "ranks=4", "reference": "ranks=1", "world_size": 4, "time_ms": 20.0,
           "speedup": 0.5, "ideal": 4.0,
           "mode": NOT_STATED, "efficiency_pct": 12.5, "efficiency_weak_pct": 50.0, "efficiency_strong_pct": 12.5,
           "lost_ms": 10.0, "late_ms": 6.0, "transfer_ms": 3.0, "transfer_by_collective": "AllReduce 3 ms",
           "other_ms": 1.0, "straggler": "rank 3 is late in 6 of 6 steps"}
    [said] = sentences(pd.DataFrame([row, row | {"point": "ranks=1", "world_size": 1}]).iloc[[0]])
    assert said == ("all: 4 ranks against ranks=1: speed-up 0.50x (ideal 4.00x), parallel efficiency 50 % if weak, "
                    f"12 % if strong ({NOT_STATED}); step 20 ms, lost 10 ms a step (against the weak ideal): 6 ms waiting for late ranks, 3 ms collective transfer "
                    "(AllReduce 3 ms), 1 ms other. rank 3 is late in 6 of 6 steps.")


def test_a_transfer_that_overlapped_compute_is_said_so_not_a_negative_rest() -> None:
    """DDP's all-reduce overlaps backward: its transfer counted in full can exceed the time lost, and
    the rest is then no negative "other" but the overlap it shows at least."""
    row = {"group": "all", "point": "ranks=2", "reference": "ranks=1", "world_size": 2, "time_ms": 18.3,
           "speedup": 1.58, "ideal": 2.0, "mode": "weak", "efficiency_pct": 79.2, "efficiency_weak_pct": 79.2,
           "efficiency_strong_pct": 39.6, "lost_ms": 3.82, "late_ms": 1.1, "transfer_ms": 8.99,
           "transfer_by_collective": "AllReduce 8.99 ms", "other_ms": 3.82 - 1.1 - 8.99, "straggler": "x"}
    [said] = sentences(pd.DataFrame([row]))
    assert "8.99 ms collective transfer (AllReduce 8.99 ms), of which at least 6.27 ms overlapped compute, " \
           "nothing else lost." in said and "-6.27" not in said


def test_the_kernels_slowdown_is_said_where_echo_measured_it() -> None:
    """A point whose run has Echo's slowdown (slowdown.median: its kernels against world size 1) says
    how much longer its compute kernels last; a point without it says nothing of kernels."""
    row = {"group": "all", "point": "ranks=2", "reference": "ranks=1", "world_size": 2, "time_ms": 10.0,
           "speedup": 1.6, "ideal": 2.0, "mode": "weak", "efficiency_pct": 80.0, "efficiency_weak_pct": 80.0,
           "efficiency_strong_pct": 40.0, "lost_ms": 2.0, "late_ms": 0.0, "transfer_ms": 1.0,
           "transfer_by_collective": "AllReduce 1 ms", "other_ms": 1.0, "straggler": "x", "kernel_slowdown": 0.218}
    [said] = sentences(pd.DataFrame([row]))
    assert said.endswith(" Its compute kernels last +22 % against one GPU (Echo's median per-kernel slowdown, "
                         "the whole capture).")
    [plain] = sentences(pd.DataFrame([row | {"kernel_slowdown": float("nan")}]))
    assert "kernels last" not in plain
