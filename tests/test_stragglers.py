"""Stragglers per step (hpcprof.analysis.stragglers) on hand-built schedules whose lateness is known:
a rank planted late by D arrives last in every step and costs D a step, for 2 ranks as for 4; noise
below the floor and a one-off delay are no straggler. The inputs the analysis gets them from: gloo's
CPU collectives in a Kineto trace (a `command` on CPU ranks) and the step hook's `hpcprof:step`
NVTX ranges of nsys exports."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from test_critical_path import expected_rows, hand_exports  # noqa: F401  (hand_exports: a fixture)

from hpcprof.analysis import stragglers as st
from hpcprof.analysis.critical_path import EVENT_COLUMNS
from hpcprof.tools.nsys.analysis import critical_path as nsys_cp
from hpcprof.tools.nsys.analysis import distributed as dist
from hpcprof.tools.nsys.stats.db import Export
from hpcprof.tools.torch.analysis import critical_path as trace_cp

STEP_NS, COLL_NS = 10_000_000, 2_000_000


def schedule(ranks: int, steps: int, late_rank: int, late_ns: int, jitter_ns: int = 0) -> list[list[dict]]:
    """Per rank, per step: the all-reduce's start and end on a common clock. Every rank computes
    STEP_NS (plus a deterministic jitter of up to `jitter_ns`), `late_rank` late_ns more; the
    all-reduce starts when a rank is ready and ends COLL_NS after the last rank is ready."""
    out: list[list[dict]] = [[] for _ in range(ranks)]
    t = 1_000_000_000
    for step in range(steps):
        ready = [t + STEP_NS + (late_ns if r == late_rank else 0) + (step * 7919 + r * 104729) % (jitter_ns + 1)
                 for r in range(ranks)]
        end = max(ready) + COLL_NS
        for r in range(ranks):
            out[r].append({"step": step, "start": ready[r], "end": end, "t0": t})
        t = end + 1_000
    return out


def events_of(sched: list[list[dict]]) -> pd.DataFrame:
    rows = [{"rank": r, "iteration": op["step"], "kind": "collective", "channel": "pg 0", "seq": 0,
             "name": "AllReduce", "start": op["start"], "end": op["end"], "prev_channel": "", "prev_seq": -1}
            for r, ops in enumerate(sched) for op in ops]
    return pd.DataFrame(rows, columns=EVENT_COLUMNS)


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_planted_straggler_is_named_with_its_cost(ranks: int) -> None:
    late = 3_000_000
    events = events_of(schedule(ranks, 8, ranks - 1, late, jitter_ns=50_000))
    steps = st.per_step(events)
    assert len(steps) == 8 and (steps["late_rank"] == ranks - 1).all() and steps["finding"].all()
    found = st.straggler(events, steps)
    assert found is not None and (found.rank, found.steps_late, found.steps, found.always) == (ranks - 1, 8, 8, True)
    assert found.median_late_ns == pytest.approx(late, abs=50_000)        # not halved at 2 ranks
    said = found.sentence()
    assert said.startswith(f"rank {ranks - 1} is late in 8 of 8 steps: it delays a step by 3") and "always the latest" in said
    assert found.median_wait_ns == pytest.approx(late, abs=50_000)        # one collective a step: wait = delay


def ddp_schedule(ranks: int, steps: int, late_rank: int, late_ns: int, buckets: int = 4) -> list[list[dict]]:
    """Per rank, per step: DDP's bucket all-reduces on one NCCL stream. Every rank computes FWD_NS,
    then its backward yields a bucket every BUCKET_NS; a bucket's all-reduce starts when its bucket is
    ready and the previous all-reduce is done, and ends XFER_NS after the last rank started it.
    `late_rank` sleeps late_ns before its forward; the others' backward does not wait for their
    all-reduces, so it runs ahead while they wait in the first bucket."""
    fwd, bucket, xfer = 3_000_000, 2_000_000, 500_000
    out: list[list[dict]] = [[] for _ in range(ranks)]
    t = 1_000_000_000
    for step in range(steps):
        done = [t] * ranks
        for b in range(buckets):
            start = [max(t + (late_ns if r == late_rank else 0) + fwd + (b + 1) * bucket, done[r]) for r in range(ranks)]
            end = max(start) + xfer
            for r in range(ranks):
                out[r].append({"step": step, "seq": b, "start": start[r], "end": end, "t0": t})
            done = [end] * ranks
        t = done[0] + 1_000
    return out


def test_a_late_rank_delays_a_ddp_step_once_not_once_per_bucket() -> None:
    """4 buckets a step, rank 3 planted 5 ms late: after the first bucket's all-reduce the others'
    next buckets wait again for rank 3's backward (1.5 ms each), so the summed lateness is
    5 + 3 x 1.5 = 9.5 ms a step, while the step ends 5 ms later than the same schedule without the
    plant: the straggler's cost is that delay, the 9.5 ms its separate wait."""
    late = 5_000_000

    def events(sched: list[list[dict]]) -> pd.DataFrame:
        rows = [{"rank": r, "iteration": op["step"], "kind": "collective", "channel": "pg 0", "seq": op["seq"],
                 "name": "AllReduce", "start": op["start"], "end": op["end"], "prev_channel": "", "prev_seq": -1}
                for r, ops in enumerate(sched) for op in ops]
        return pd.DataFrame(rows, columns=EVENT_COLUMNS)

    planted, clean = ddp_schedule(4, 6, 3, late), ddp_schedule(4, 6, -1, 0)
    delay = (planted[0][-1]["end"] - planted[0][-1]["t0"]) - (clean[0][-1]["end"] - clean[0][-1]["t0"])
    assert delay == late                                           # the schedule's own step delay
    found = st.straggler(events(planted), st.per_step(events(planted)))
    assert found is not None and (found.rank, found.steps_late, found.always) == (3, 6, True)
    assert found.median_late_ns == pytest.approx(delay, rel=1e-6)
    assert found.median_wait_ns == pytest.approx(late + 3 * 1_500_000, rel=1e-6)
    assert "it delays a step by 5 ms" in found.sentence() and "wait 9.5 ms a step" in found.sentence()
    assert st.straggler(events(clean), st.per_step(events(clean))) is None


def test_noise_and_a_one_off_delay_are_no_straggler() -> None:
    events = events_of(schedule(4, 8, -1, 0, jitter_ns=80_000))             # jitter below the 100 µs floor
    steps = st.per_step(events)
    assert not steps["finding"].any() and st.straggler(events, steps) is None
    once = events.copy()                                                     # rank 2 late 5 ms in step 3 only
    at = (once["iteration"] == 3) & (once["rank"] != 2)
    once.loc[at, "start"] -= 5_000_000
    steps = st.per_step(once)
    assert steps.loc[steps["finding"], "iteration"].tolist() == [3] and st.straggler(once, steps) is None


def write_gloo_trace(path: Path, rank: int, ops: list[dict], offset_ns: int) -> None:
    """A Kineto trace of a CPU rank: ProfilerStep#N on the main thread, gloo's all_reduce annotation
    on its worker thread (no GPU event at all), times in µs on the rank's own clock."""
    events = []
    for op in ops:
        us = (op["t0"] + offset_ns) / 1000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{op['step'] + 2}", "pid": 1,
                       "tid": 1, "ts": us, "dur": (op["end"] - op["t0"]) / 1000 + 1, "args": {}})
        events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2,
                       "ts": (op["start"] + offset_ns) / 1000, "dur": (op["end"] - op["start"]) / 1000, "args": {}})
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "backend": "gloo"}, "traceEvents": events}))


def test_gloo_collectives_of_cpu_traces_give_the_straggler(tmp_path: Path) -> None:
    sched = schedule(3, 6, 1, 4_000_000, jitter_ns=20_000)
    paths = []
    for rank, ops in enumerate(sched):
        paths.append(tmp_path / f"rank{rank}.pt.trace.json")
        write_gloo_trace(paths[-1], rank, ops, offset_ns=rank * 7_000_003)
    events, errors = trace_cp.load_events(paths)
    assert errors == [] and set(events.loc[events["kind"] == "collective", "name"]) == {"AllReduce"}
    found = st.straggler(events, st.per_step(events))
    assert found is not None and found.rank == 1 and found.median_late_ns == pytest.approx(4_000_000, abs=20_000)
    rows, _ = trace_cp.critical_path(events)
    assert (rows["critical_rank"] == 1).all() and rows["held_ns"].min() > 3_900_000


def test_nsys_steps_of_the_hook_are_the_iterations(hand_exports: list[Path], tmp_path: Path) -> None:  # noqa: F811
    """The hand-built exports with the step hook's ranges instead of the workload's: `hpcprof:step`
    for the timed iterations, `hpcprof:step-unmeasured` for the warm-up, no `timed` range; the same
    critical path."""
    paths = []
    for path in hand_exports:
        paths.append(tmp_path / path.name)
        shutil.copy(path, paths[-1])
        with sqlite3.connect(paths[-1]) as con:
            con.execute("DELETE FROM NVTX_EVENTS WHERE text IN ('timed', 'warmup')")
            first = con.execute("SELECT MIN(start) FROM NVTX_EVENTS WHERE text = 'iteration'").fetchone()[0]
            con.execute("UPDATE NVTX_EVENTS SET text = CASE WHEN start = ? THEN 'hpcprof:step-unmeasured' "
                        "ELSE 'hpcprof:step' END WHERE text = 'iteration'", (first,))
    events = pd.concat([nsys_cp.rank_events(dist.load_activity([Export(p)], {str(p): r}))
                        for r, p in enumerate(paths)], ignore_index=True)
    rows, _ = nsys_cp.critical_path(events)
    pd.testing.assert_frame_equal(rows, expected_rows())
