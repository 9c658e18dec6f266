"""Peak device memory per step (hpcprof/inject/_hpcprof_memory.py, called by the step hook) read by
`collect` (hpcprof.analysis.steps: steps_memory) into memory.* headline metrics. The steps files
below are written as the hook writes them on a GPU (header with the device's capacity, each step's
"mem": [allocated peak, reserved peak]); on this CPU machine the real hook records no memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcprof.analysis.steps import steps_tables
from hpcprof.core import catalog as c

INJECT = Path(__file__).resolve().parents[1] / "hpcprof" / "inject"
GIB = 1 << 30
CAPACITY = 150_754_820_096     # an H200's total_memory
#: rank -> each step's (allocated peak, reserved peak); the window is steps 3..5 (skip 2, steps 3)
PEAKS = {0: [(9 * GIB, 12 * GIB), (20 * GIB, 22 * GIB), (21 * GIB, 24 * GIB), (23 * GIB, 25 * GIB),
             (22 * GIB, 26 * GIB), (40 * GIB, 41 * GIB)],
         1: [(5 * GIB, 5 * GIB), (6 * GIB, 7 * GIB), (30 * GIB, 31 * GIB), (29 * GIB, 35 * GIB), (28 * GIB, 30 * GIB)]}


def write_steps(run: Path) -> None:
    (run / "steps").mkdir(parents=True)
    for rank, peaks in PEAKS.items():
        lines = [json.dumps({"rank": rank, "pid": 7, "host": "gpu01", "tool": "none", "skip": 2, "steps": 3,
                             "capacity": CAPACITY})]
        lines += [json.dumps({"step": n, "end_ns": 1000 * n, "ns": None if n == 1 else 1000, "mem": [a, r]})
                  for n, (a, r) in enumerate(peaks, 1)]
        (run / "steps" / f"rank{rank}.jsonl").write_text("\n".join(lines) + "\n")


def test_the_window_s_peaks_per_rank(tmp_path: Path) -> None:
    write_steps(tmp_path)
    tables, problems = steps_tables(tmp_path)
    assert problems == []
    memory = tables[c.STEPS_MEMORY.key].set_index("rank")
    for rank, peaks in PEAKS.items():
        window = peaks[2:5]
        allocated, reserved = max(a for a, _ in window), max(r for _, r in window)
        at = next((a, r) for a, r in window if a == allocated)
        row = memory.loc[rank]
        assert (row["steps"], row["peak_allocated"], row["peak_reserved"]) == (len(window), allocated, reserved)
        assert row["fragmentation"] == at[1] - at[0] and row["capacity"] == CAPACITY
        assert row["headroom"] == CAPACITY - reserved
    times = tables[c.STEPS_TIMES.key]
    assert times["allocated_peak"].tolist() == [a for peaks in PEAKS.values() for a, _ in peaks]


def test_the_headline_metrics_in_gib(tmp_path: Path) -> None:
    from hpcprof.analysis.summary import memory_metrics

    write_steps(tmp_path)
    tables, _ = steps_tables(tmp_path)
    metrics = {name: (value, unit) for name, value, unit in memory_metrics(tables[c.STEPS_MEMORY.key])}
    # rank 0's window: allocated 23 (step 4), reserved 26; rank 1's: allocated 30 (step 3), reserved 35
    assert metrics == {"memory.peak_allocated": (30.0, "GiB"), "memory.peak_reserved": (35.0, "GiB"),
                       "memory.fragmentation": (2.0, "GiB"), "memory.headroom": (CAPACITY / GIB - 35, "GiB")}
    assert all(c.declared(name) is not None for name in metrics)


@pytest.mark.slow
def test_steps_without_memory_have_no_memory_table(tmp_path: Path) -> None:
    """The real hook on this CPU machine: no capacity, no "mem", no steps_memory (and the times as before)."""
    code = ("import torch\nm = torch.nn.Linear(4, 4)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            "for _ in range(6):\n    m(torch.ones(2, 4)).sum().backward()\n    o.step()\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(INJECT), "HPCPROF_RUN_DIR": str(tmp_path), "HPCPROF_RANK": "0",
           "HPCPROF_STEPS": "1", "HPCPROF_STEPS_SKIP": "2", "HPCPROF_STEPS_COUNT": "3", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    head, *steps = [json.loads(line) for line in (tmp_path / "steps" / "rank0.jsonl").read_text().splitlines()]
    assert "capacity" not in head and len(steps) == 6 and not any("mem" in s for s in steps)
    tables, _ = steps_tables(tmp_path)
    assert c.STEPS_MEMORY.key not in tables and tables[c.STEPS_TIMES.key]["allocated_peak"].isna().all()


def test_a_damaged_memory_field_leaves_its_line_out(tmp_path: Path) -> None:
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "rank0.jsonl").write_text(
        '{"rank":0,"pid":1,"host":"h","tool":"none","skip":0,"steps":3,"capacity":"lots"}\n'
        '{"step":1,"end_ns":10,"ns":null,"mem":[5]}\n{"step":2,"end_ns":30,"ns":20,"mem":[7,9]}\n'
        '{"step":3,"end_ns":50,"ns":20,"mem":"x"}\n')
    tables, _ = steps_tables(tmp_path)
    assert tables[c.STEPS_TIMES.key]["step"].tolist() == [2]
    memory = tables[c.STEPS_MEMORY.key]
    assert memory[["peak_allocated", "peak_reserved", "fragmentation"]].values.tolist() == [[7, 9, 2]]
    assert memory["capacity"].isna().all() and memory["headroom"].isna().all()


def test_a_workload_s_own_timer_gives_the_same_metrics_over_its_counted_steps() -> None:
    """ddp's step rows as its PhaseTimer writes them on CUDA (the outermost `step` phase with its
    peaks and the capacity): warm-up and the profiled window step left out, as for its times."""
    import msgspec
    import pandas as pd

    from hpcprof.analysis.summary import run_summary
    from hpcprof.run.record import RunRecord

    rows = []
    for rank in (0, 1):
        for step, counted, window in ((0, False, False), (1, True, False), (2, True, True), (3, True, False)):
            peak = (10 + 10 * step + rank) * GIB   # warm-up and the window step hold no peak of the counted ones
            rows.append({"rank": rank, "iteration": step, "phase": "step", "time_ms": 5.0, "counted": counted,
                         "window": window, "allocated_peak": peak if step != 2 else 99 * GIB,
                         "reserved_peak": peak + GIB, "capacity": CAPACITY})
            rows.append({"rank": rank, "iteration": step, "phase": "forward", "time_ms": 2.0, "counted": counted,
                         "window": window})
    table = pd.DataFrame(rows)
    record = msgspec.convert({"experiment": {"name": "e", "workload": {"kind": "ddp"},
                                             "profile": {"tool": "none", "ranks": "all"}},
                              "site": {}, "sweep_point": {}, "ranks_per_node": 2, "world_size": 2}, RunRecord)
    metrics = {name: value for name, value, _ in run_summary({c.DDP_STEPS.name: table}.get, record)}
    assert metrics["memory.peak_allocated"] == 41.0 and metrics["memory.peak_reserved"] == 42.0   # rank 1, step 3
    assert metrics["memory.fragmentation"] == 1.0 and metrics["memory.headroom"] == CAPACITY / GIB - 42.0


def test_profile_memory_is_rendered_and_its_snapshots_collected(tmp_path: Path) -> None:
    """`profile.memory: true`: the rank wrapper asks the step hook for the memory history; collect
    reads each rank's snapshot (<run>/memory/rank<N>.pickle) as `hpcprof memory` does: here one
    made by test_memory_snapshot's allocator model, and a damaged one named in one line."""
    import pickle

    from hpcprof_cli import hpcprof
    from test_memory_snapshot import training

    from hpcprof.analysis.memory import analyse, snapshot_tables

    exp = tmp_path / "exp.yaml"
    exp.write_text('name: m\nworkload:\n  kind: command\n  argv: ["python", "train.py"]\n'
                   "resources:\n  nodes: 1\n  ranks_per_node: 1\nprofile:\n  memory: true\n")
    hpcprof("render", str(exp), "--site", "local", "-o", "out", cwd=tmp_path, check=True)
    assert "export HPCPROF_MEMORY_HISTORY=100000" in (tmp_path / "out" / "rank_wrapper.sh").read_text()
    hpcprof("render", str(exp), "--site", "local", "-o", "off", "--set", "profile.memory=false", cwd=tmp_path,
            check=True)
    assert "HPCPROF_MEMORY_HISTORY" not in (tmp_path / "off" / "rank_wrapper.sh").read_text()
    (tmp_path / "memory").mkdir()
    snapshot = training(8).snapshot()
    (tmp_path / "memory" / "rank0.pickle").write_bytes(pickle.dumps(snapshot))
    (tmp_path / "memory" / "rank1.pickle").write_bytes(b"\x80\x04\x95")
    tables, problems = snapshot_tables(tmp_path)
    [found] = analyse(snapshot)
    sites = tables[c.STEPS_MEMORY_SITES.key]
    assert sites[["site", "bytes", "blocks"]].values.tolist() == [[h.site, h.bytes, h.blocks] for h in found.at_peak]
    assert sites["bytes"].sum() == found.peak and set(sites["rank"]) == {0}
    kinds = tables[c.STEPS_MEMORY_KINDS.key]
    assert kinds[["kind", "bytes"]].values.tolist() == [[h.site, h.bytes] for h in found.kinds_at_peak]
    assert kinds["bytes"].sum() == found.peak
    growth = tables[c.STEPS_MEMORY_GROWTH.key].set_index("site")
    assert growth.loc["train.py:51 main", "blocks"] == 8
    assert len(problems) == 1 and "rank1.pickle: not read as a PyTorch memory snapshot" in problems[0]


@pytest.mark.slow
def test_the_hook_with_memory_history_on_a_cpu_program_records_none(tmp_path: Path) -> None:
    code = ("import torch\nm = torch.nn.Linear(4, 4)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            "for _ in range(6):\n    m(torch.ones(2, 4)).sum().backward()\n    o.step()\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(INJECT), "HPCPROF_RUN_DIR": str(tmp_path), "HPCPROF_RANK": "0",
           "HPCPROF_STEPS": "1", "HPCPROF_STEPS_SKIP": "2", "HPCPROF_STEPS_COUNT": "3", "OMP_NUM_THREADS": "1",
           "HPCPROF_MEMORY_HISTORY": "1000"}
    done = subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120, capture_output=True, text=True)
    assert done.stderr == "" and not (tmp_path / "memory").exists()
    assert len((tmp_path / "steps" / "rank0.jsonl").read_text().splitlines()) == 7
