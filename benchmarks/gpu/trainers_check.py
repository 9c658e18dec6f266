"""Check trainers.sh's collected runs of public trainers, one line per run:
its state; `window.iterations` against the optimizer steps the step hook saw in the window; the
median step time over the window (hpcprof's `iteration.median`, from the hook) against the
trainer's own logged step times of the same steps (rank 0's log: nanoGPT's `iter N: ... time X ms`,
timm's `Train: E [ N/M ...] ... Time: X s`, whole ms; its step ends after a loss.item() that waits for
the GPU, the hook's where optimizer.step returns, so single steps differ, their sums agree: the
means are printed beside); `idle_pct` against a hand computation on the rank
files (nsys: SQL on the export; torch: the Kineto JSON, on HTA's whole-µs grid as hpcprof and HTA
read it, and on its own fractional µs beside), and whether the report has its overhead line; the
slowdown hpcprof states from the run's own steps (profiler.slowdown_pct, where the run has unprofiled
steps); a profiled run's idle by named cause and line (its `<tool>_idle_causes` table, over ranks);
a run without a profiler: its peak memory (memory.peak_allocated, the step hook's peaks over the
window) against the trainer's own torch.cuda.max_memory_allocated over a whole run alone (PEAKS:
memory/peak.py's `peak TRAINER {json}` lines). Exit 1 when a run fails a check.

    python benchmarks/gpu/trainers_check.py WORKDIR PEAKS REPORT_TEXT...

The hand computation, per rank: the window's steps are the `hpcprof:step` NVTX ranges (nsys) or
the `ProfilerStep#N` annotations but the last (torch, as HTA drops the last one); the GPU
operations (kernels, memcpys, memsets) whose launch (the CUDA runtime call of the same correlation
id) starts inside a step span the window, from the first one's start to the last one's end; idle is
that span less the union of every GPU operation of the rank inside it. idle_pct = 100 · Σ idle / Σ
span over the ranks.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import sqlite3
import statistics
import sys
from pathlib import Path

from hpcprof.analysis.idle import across_ranks
from hpcprof.analysis.summary import run_headline
from hpcprof.campaign.jobstate import recorded_state
from hpcprof.run.record import read_record
from hpcprof.run.results import read_table
from hpcprof.run.rundir import RunDir

STEP_RANGE = "hpcprof:step"
#: a trainer's own step time in its rank 0 log: (step number as logged, seconds)
NANOGPT = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms")
TIMM = re.compile(r"Train: (\d+) \[\s*(\d+)/\d+ .*?Time: ([\d.]+)s")


def union_inside(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """|union of `intervals` ∩ [lo, hi]|."""
    covered, end = 0, lo
    for start, stop in sorted(intervals):
        start, stop = max(start, end), min(stop, hi)
        if stop > start:
            covered += stop - start
            end = stop
    return covered


def nsys_idle(export: Path) -> tuple[int, int, int]:
    """(idle, span, idle) of one rank's export over its `hpcprof:step` window (ns; exact)."""
    db = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    names = {i: s for i, s in db.execute("SELECT id, value FROM StringIds")}
    steps = [(s, e) for s, e, text, text_id in db.execute(
        "SELECT start, end, text, textId FROM NVTX_EVENTS WHERE end IS NOT NULL")
        if (text or names.get(text_id)) == STEP_RANGE]
    launches = {}
    for corr, start, pid in db.execute("SELECT correlationId, start, globalTid / 16777216 FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
        launches[(pid, corr)] = start
    ops = []
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        try:
            ops += db.execute(f"SELECT start, end, correlationId, globalPid / 16777216 FROM {table}").fetchall()
        except sqlite3.OperationalError:
            continue
    inside = [(s, e) for s, e, corr, pid in ops
              if (at := launches.get((pid, corr))) is not None and any(a <= at <= b for a, b in steps)]
    if not inside:
        return 0, 0, 0
    lo, hi = min(s for s, _ in inside), max(e for _, e in inside)
    idle = (hi - lo) - union_inside([(s, e) for s, e, _, _ in ops], lo, hi)
    return idle, hi - lo, idle


def torch_idle(trace: Path) -> tuple[int, int, int]:
    """(idle, span, idle on the exact times) in ns of one rank's Kineto trace over its ProfilerSteps
    but the last (and without the GPU work launched from its start on, as HTA and hpcprof read
    it): idle on HTA's whole-µs grid (each event's start rounded up, its end down, as HTA
    and hpcprof read Kineto's fractional µs), and on Kineto's own fractional µs."""
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events          # the CPU's (not the GPU's copy)
                   if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#"))
    cut = steps[-1][0]       # the last step is dropped with the GPU work launched from its start on
    steps = steps[:-1]
    launches = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    gpu = [(e["ts"], e["ts"] + e["dur"], corr) for e in events
           if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
           and launches.get(corr := e.get("args", {}).get("correlation"), cut) < cut]
    inside = [(s, e) for s, e, corr in gpu
              if (at := launches.get(corr)) is not None and any(a <= at <= b for a, b in steps)]
    if not inside:
        return 0, 0, 0
    lo, hi = min(s for s, _ in inside), max(e for _, e in inside)
    exact = (hi - lo) - union_inside([(s, e) for s, e, _ in gpu], lo, hi)
    grid = (hi - lo) - union_inside([(math.ceil(s), math.floor(e)) for s, e, _ in gpu], lo, hi)   # HTA's whole µs
    return round(grid * 1000), round((hi - lo) * 1000), round(exact * 1000)


def trainer_steps(log: Path) -> dict[int, float]:
    """The trainer's own time of each optimizer step (1-based, as the step hook counts), in ms."""
    out: dict[int, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if found := NANOGPT.search(line):
            out[int(found[1]) + 1] = float(found[2])       # iter 0 is the first optimizer step
        elif found := TIMM.search(line):
            out[int(found[2]) + 1] = 1000 * float(found[3])   # update 0 of epoch 0 is the first
    return out


def own_peaks(path: Path) -> dict[str, int]:
    """Each trainer's own peak allocated bytes, the largest over its ranks (PEAKS lines)."""
    out: dict[str, int] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        _, trainer, data = line.split(" ", 2)
        out[trainer] = max(out.get(trainer, 0), int(json.loads(data)["max_memory_allocated"]))
    return out


def idle_explained(run: Path, tool: str) -> str:
    """The window's idle per step and its named causes over ranks (the report's, with line and evidence)."""
    causes = read_table(run, f"{tool}_idle_causes")
    if causes is None or causes.empty:
        return "; idle causes: no table"
    idle_ms = float(causes.groupby("rank")["idle_ms"].first().mean())
    named = across_ranks(causes)
    said = ", ".join(f"{r.cause} {r.ms_per_step:.2f} ms/step ({r.pct_of_idle:.0f} % of idle) at {r.at} [{r.detail}]"
                     for r in named.itertuples()) or "none above the naming threshold"
    return f"; idle {idle_ms:.2f} ms/step, named causes: {said}"


def check(run: Path, reports: str, peaks: dict[str, int]) -> tuple[str, bool]:
    record = read_record(run / "config.json")
    tool = record.tool
    state = recorded_state(RunDir(run)).state
    metrics = {n: v for n, v, _ in run_headline(run, record).metrics}
    steps = read_table(run, "steps_times")
    in_window = steps[steps["in_window"].astype(bool)] if steps is not None else None
    hook_steps = sorted(set(in_window["step"].astype(int))) if in_window is not None else []
    own = trainer_steps(run / "logs" / "rank0.log")
    own_ms = [own[s] for s in hook_steps if s in own]
    median_own = statistics.median(own_ms) if own_ms else float("nan")
    median_hp = metrics.get("iteration.median", float("nan"))
    diff = 100 * (median_hp / median_own - 1) if own_ms else float("nan")
    hook_ms = in_window[in_window["rank"] == 0]["duration_ns"].astype(float) / 1e6 if in_window is not None else []
    means = (f"; means {statistics.fmean(hook_ms):.2f} vs {statistics.fmean(own_ms):.2f} ms (rank 0)"
             if own_ms and len(hook_ms) else "")
    iterations = metrics.get("window.iterations")
    ok = state == "COMPLETED" and abs(diff) <= 5
    memory = " memory" if record.experiment.profile.memory else ""
    text = (f"{run.name} {record.experiment.name} tool={tool}{memory} affinity={record_affinity(run)} "
            f"state={state}: "
            f"steps in window {len(hook_steps)} ({hook_steps[0] if hook_steps else '-'}-{hook_steps[-1] if hook_steps else '-'}), "
            f"window.iterations {iterations}, median step {median_hp:.2f} ms (hpcprof) vs {median_own:.2f} ms "
            f"(trainer's log, {len(own_ms)} steps): {diff:+.2f} %{means}")
    if "profiler.slowdown_pct" in metrics:
        text += (f"; stated slowdown {metrics['profiler.slowdown_pct']:+.1f} % [{metrics.get('profiler.slowdown_pct.low', math.nan):+.1f}, "
                 f"{metrics.get('profiler.slowdown_pct.high', math.nan):+.1f}] against its own unprofiled steps")
    own_peak = peaks.get(record.experiment.name)
    if tool == "none" and "memory.peak_allocated" in metrics:
        peak = round(metrics["memory.peak_allocated"] * (1 << 30))
        text += f"; peak allocated {peak:,} B (hpcprof, window) vs "
        text += f"{own_peak:,} B (the trainer's own, whole run): {100 * (peak / own_peak - 1):+.3f} %" if own_peak else "no own peak"
    if tool != "none":
        ok = ok and iterations == len(hook_steps)
        files = sorted((run / "profiles" / tool).glob("rank*.sqlite" if tool == "nsys" else "rank*.pt.trace.json*"))
        idle = span = exact = 0
        for f in files:
            i, s, e = (nsys_idle if tool == "nsys" else torch_idle)(f)
            idle, span, exact = idle + i, span + s, exact + e
        hand = 100 * idle / span if span else float("nan")
        got = metrics.get("idle_pct", float("nan"))
        text += f"; idle_pct {got:.3f} % (hpcprof) vs {hand:.3f} % (by hand, {len(files)} rank files)"
        if tool == "torch":
            text += f" ({100 * exact / span if span else float('nan'):.3f} % on Kineto's fractional µs)"
        ok = ok and abs(got - hand) <= 0.05
        overhead = f"{tool} slowed each step" in reports or f"{tool} changed each step" in reports
        text += f"; overhead line {'present' if overhead else 'MISSING'}"
        ok = ok and overhead
        text += idle_explained(run, tool)
    return text + ("" if ok else "  <-- FAILED"), ok


def record_affinity(run: Path) -> str:
    """The GPU convention the rank wrapper used (its log line)."""
    log = run / "logs" / "rank1.log"
    found = re.search(r"gpu_affinity ([\w-]+)", log.read_text(errors="replace")) if log.is_file() else None
    return found[1] if found else "?"


def main(workdir: Path, peaks_file: Path, report_files: list[Path]) -> int:
    reports = "\n".join(p.read_text(errors="replace") for p in report_files)
    peaks = own_peaks(peaks_file)
    failed = 0
    for config in sorted(workdir.glob("*/*/config.json")):
        try:
            line, ok = check(config.parent, reports, peaks)
        except Exception as error:   # one run's damaged files do not hide the others' lines
            line, ok = f"{config.parent.name}: the check failed: {error!r}  <-- FAILED", False
        print(line)
        failed += not ok
    print(f"{failed} run(s) failed a check")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]]))
