"""What limits each sweep point, and the fixes ranked by the time they could save per step.

A step (one counted iteration, `iteration.mean`; without one, the measured window per iteration) is
split over the measured window's GPU time per rank into the parts that can limit it:

- compute: the non-communication kernels (GEMM, attention, ... by hpcprof.analysis.categories),
  with the matmul phases' rate against what the machine attains where the workload reports one;
- exposed communication: the NCCL kernels' time not overlapped by compute (overlap_pct);
- copies: memcpys between host and device, copies on the device and memsets (a fix each: pinned
  memory and non_blocking only for the host's);
- GPU idle: the window's idle (idle_pct): the GPU waited for the host (launches, synchronisation,
  input);
- imbalance: a rank the others wait for, only where sweep.persistent_stragglers finds it above noise,
  taken out of the exposed communication (the others wait for it inside their collectives).

The parts sum to the step: the GPU-busy parts are fitted to the GPU's busy time (kernels at once on
several streams), the part of the step outside the measured window is its own, and where the window
per iteration is longer than the counted step (a workload's own timer that leaves out the time
between its iterations) the idle gives up that time first, the busy parts the rest.

The limiter is the largest part. Each fix's saving is an upper bound per step, stated as such: hiding
a collective behind compute saves at most its exposed time (and no more than the compute there is to
hide it behind), bringing a rate to its bound saves at most `time · (1 − rate / bound)` (the bound:
the ceiling `hpcprof bench ceilings` measured in the same job, else the datasheet peak, which no
program reaches, so that bound is looser; a trainer's collectives, which report no rate of their own,
by their bus bandwidth per size bucket against the ceiling nearest in size), removing
idle or copies at most their time, balancing the ranks at most the straggler's excess. A fix whose
bound is below the point's noise (the repetitions' 95 % CI of the iteration time, or the
per-iteration spread: 1.4826 · the median absolute deviation of the counted iterations' times) is
noise, never a fix; how many were dropped is said.

Without the profiler: where the run measured its own unprofiled step (profiler.unprofiled_step,
hpcprof.analysis.steps.perturbation) and the profiler slowed the step, the diagnosis is re-based on
that step: the GPU-busy parts stay as measured (the profiler is taken to leave kernel durations
alone: it slows the host), the GPU idle becomes max(0, unprofiled step − busy), and where the busy
parts exceed the unprofiled step the exposed communication gives up the excess (a kernel's wait for
the profiled ranks' lateness). The limiter and the fixes are ranked on these; the parts as
measured are said beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import pandas as pd

from hpcprof.analysis.idle import across_ranks, short
from hpcprof.core import catalog as c
from hpcprof.core.safe_text import rich_text
from hpcprof.report import sweep
from hpcprof.report.sweep import Point
from hpcprof.report.terminal import format_value

if TYPE_CHECKING:
    from rich.console import Console

    from hpcprof.report.runs import RunInfo

#: the categories of copies (the rest of the non-NCCL kernels is compute; a dtype cast is compute,
#: hpcprof.analysis.categories' elementwise), and the one of them that moves data between host and device
COPIES = ("memcpy", "memset", "copy")
HOST_COPIES = "memcpy"
#: the fixes shown per point
TOP = 3
#: the parts re-basing on the unprofiled step changes, and the GPU-busy parts it keeps
IDLE, EXPOSED, OUTSIDE, IMBALANCE = "GPU idle", "exposed communication", "outside the measured window", "imbalance"
BUSY = ("compute", EXPOSED, "copies", IMBALANCE)


@dataclass(frozen=True)
class Part:
    """One part of a step: its name, its time per step (ms), what it is made of, and whether the
    profile saw it (the step's time outside the measured window is not observed: never the limiter)."""

    name: str
    ms: float
    detail: str = ""
    observed: bool = True
    measured_ms: float | None = None    # as measured, where the profiler's slowdown changed it (ms: without it)


@dataclass(frozen=True)
class Fix:
    """One way to make a step faster: what to do and the most it could save per step (ms)."""

    action: str
    saves_ms: float
    basis: str
    part: str = ""      # the part whose time it saves, where re-basing on the unprofiled step changes it


@dataclass(frozen=True)
class Diagnosis:
    """A point's diagnosis: the step, its parts, the largest (the limiter), the fixes above noise by
    their bound (largest first), the noise, and how many fixes fell below it."""

    point: str
    step_ms: float
    step_source: str
    parts: list[Part]
    fixes: list[Fix]
    noise_ms: float
    dropped: int = 0
    rates: list[str] = field(default_factory=list)      # where each rate phase stands against its bound
    measured_step_ms: float | None = None               # the step as measured, where step_ms is the unprofiled one

    @property
    def limiter(self) -> Part | None:
        """The largest observed part."""
        seen = [part for part in self.parts if part.observed]
        return max(seen, key=lambda part: part.ms) if seen else None


def ms(value: float) -> str:
    """A time per step for reading: `15 µs`, `0.404 ms`."""
    return f"{value * 1e3:.3g} µs" if value < 0.1 else f"{format_value(value)} ms"


def share(value: float, step: float) -> str:
    return f"{format_value(100.0 * value / step)} %" if step else "?"


def iteration_noise(point: Point, series: pd.DataFrame) -> float:
    """The point's noise in ms: the larger of the repetitions' 95 % CI half-width of the iteration
    time and the per-iteration spread (1.4826 · MAD of its counted iterations' times); 0 when neither
    is known."""
    ci95 = sweep.point_ci95(point)
    spread = 0.0
    if not series.empty:
        times = series[(series["point"] == point.label) & series["counted"].astype(bool)]["time_ms"]
        if len(times) >= 3:
            spread = 1.4826 * float((times - times.median()).abs().median())
    return max(0.0 if math.isnan(ci95) else ci95, spread)


@dataclass(frozen=True)
class Step:
    """A point's step: its time (ms), the GPU window's span per step (ms), the window's iterations
    (1 where the window is one unit, e.g. Echo's one-step capture) and what the step time is."""

    ms: float
    window_ms: float
    iterations: float
    source: str


def step_time(point: Point) -> Step | None:
    """The point's step (None without an iteration time or a window)."""
    iterations = point.metric(c.WINDOW_ITERATIONS) or 1.0
    duration = point.metric(c.WINDOW_DURATION)
    window = duration / iterations if duration else math.nan
    mean = point.metric(c.ITERATION_MEAN)
    if mean:
        return Step(mean, window, iterations, f"{c.ITERATION_MEAN.name} ({c.COUNTED})")
    if not math.isnan(window):
        return Step(window, window, iterations, f"{c.WINDOW_DURATION.name} per iteration ({c.MEASURED})")
    return None


def categories_per_step(point: Point, step: Step) -> dict[str, float]:
    """GPU time per rank and step of each kernel category over the measured window (ms)."""
    return {parts["category"]: value / step.iterations
            for parts, value in sweep.metric_values(point, c.GPU_TIME[1])}


def rates(points: list[Point]) -> pd.DataFrame:
    """Each point's rate phases (matmul TFLOP/s, collective busbw) against what bounds them: the
    ceiling measured in the same job where the run has one (hpcprof.report.ceilings), else the
    datasheet peak (point, phase, what, value, unit, pct, against)."""
    from hpcprof.report.ceilings import points_attainable

    rows = []
    measured = points_attainable([(p.label, p.first) for p in points])
    for _, row in measured[measured["pct_of_ceiling"].notna()].iterrows():
        phase, metric = sweep.rate_of(str(row["figure"]))
        if metric is not None:
            rows.append({"point": row["point"], "phase": phase, "what": metric.name.rpartition(".")[2],
                         "value": row["value"], "unit": row["unit"], "pct": row["pct_of_ceiling"],
                         "against": "ceiling measured in the same job ("
                                    + ", ".join(filter(None, (row["nearest_size"], row["ceiling_way"]))) + ")"})
    seen = {(r["point"], r["phase"]) for r in rows}
    peaks = sweep.peak_shares(points)
    for _, row in peaks[peaks["pct"].notna()].iterrows():
        if (row["point"], row["phase"]) not in seen:
            rows.append({"point": row["point"], "phase": row["phase"], "what": row["what"], "value": row["value"],
                         "unit": row["unit"], "pct": row["pct"],
                         "against": f"{row['reference']} (datasheet, no ceiling measured)"})
    return pd.DataFrame(rows, columns=["point", "phase", "what", "value", "unit", "pct", "against"])


def rate_fixes(point: Point, bounds: pd.DataFrame) -> tuple[list[Fix], list[str]]:
    """Per rate phase of the point against what bounds it (rates()): the fix of bringing it there
    (phase time · (1 − value / bound)) and the sentence of where it stands."""
    fixes, said = [], []
    for _, row in bounds[bounds["point"] == point.label].iterrows():
        phase_ms = next((v for parts, v in sweep.metric_values(point, c.PHASE_TIME) if parts["phase"] == row["phase"]),
                        None)
        pct = float(row["pct"])
        said.append(f"{row['phase']} {format_value(row['value'])} {row['unit']} = {format_value(pct)} % of the "
                    f"{row['against']}")
        if phase_ms and pct < 100.0:
            verb = "matmul" if row["what"] == "tflops" else "collective"
            fixes.append(Fix(f"bring the {row['phase']} {verb} to the {row['against']} (now {format_value(pct)} %)",
                             phase_ms * (1.0 - pct / 100.0), f"{row['phase']}'s time · (1 − rate / bound)"))
    return fixes, said


def collective_fixes(point: Point, bounds: pd.DataFrame, step: Step) -> tuple[list[Fix], list[str]]:
    """Where the workload reports no collective rate of its own (any trainer, not seqpar's phases): per
    collective and size bucket of the first run's bus bandwidth table, bringing it to the ceiling measured
    in the same job (its kernels' time per step · (1 − busbw / ceiling)) and the sentence of where it stands."""
    from hpcprof import profilers
    from hpcprof.report.ceilings import collective_shortfalls
    from hpcprof.run.results import read_table

    own = bounds[(bounds["point"] == point.label) & (bounds["what"] == "busbw")]
    profiler = profilers.find(point.first.tool)
    name = profiler.table("busbw") if profiler is not None else None
    if not own.empty or name is None:
        return [], []
    run_dir = point.first.run.path
    busbw, ceilings = read_table(run_dir, name), read_table(run_dir, c.BENCH_CEILINGS.name)
    if busbw is None or ceilings is None or busbw.empty or ceilings.empty:
        return [], []
    fixes, said = [], []
    shortfalls = collective_shortfalls(busbw, ceilings).sort_values("time_ms", ascending=False)
    for i, row in enumerate(shortfalls.itertuples()):
        what = f"{row.collective} ({row.bucket})"
        against = f"ceiling measured in the same job ({row.ceiling_size}, {row.ceiling_way})"
        if i < TOP:     # where the collectives with the most time stand
            said.append(f"{what} {format_value(row.busbw_gbps)} GB/s = {format_value(row.pct)} % of the {against}")
        if row.pct < 100.0:
            fixes.append(Fix(f"bring the {what} to the {against} (now {format_value(row.pct)} %)",
                             row.time_ms / step.iterations * (1.0 - row.pct / 100.0),
                             "its kernels' time · (1 − busbw / ceiling); a kernel's time includes its wait for "
                             "the other ranks"))
    return fixes, said


def idle_causes(point: Point) -> pd.DataFrame | None:
    """The named causes of the point's first run's GPU idle (hpcprof.analysis.idle), None without the table."""
    from hpcprof.run.results import read_table

    frame = read_table(point.first.run.path, c.table_name(point.first.tool, "idle_causes"))
    return across_ranks(frame) if frame is not None and not frame.empty else None


def diagnose(point: Point, bounds: pd.DataFrame, stragglers: pd.DataFrame, series: pd.DataFrame) -> Diagnosis | None:
    """The diagnosis of one point (None without a step time or GPU categories)."""
    step = step_time(point)
    cats = categories_per_step(point, step) if step is not None else {}
    if step is None or not cats:
        return None
    step_ms = step.ms
    comm = {k: v for k, v in cats.items() if k.startswith("nccl.")}
    copies = {k: v for k, v in cats.items() if k in COPIES}
    compute = {k: v for k, v in cats.items() if k not in comm and k not in copies}
    overlap = (point.metric(c.OVERLAP_PCT) or 0.0) / 100.0
    idle_pct = point.metric(c.IDLE_PCT)
    window = step.window_ms if not math.isnan(step.window_ms) else step_ms
    compute_ms, comm_ms = sum(compute.values()), sum(comm.values())
    top_compute = sorted(compute.items(), key=lambda kv: -kv[1])[:3]
    parts = [Part("compute", compute_ms, ", ".join(f"{k} {ms(v)}" for k, v in top_compute))]
    if comm:
        parts.append(Part(EXPOSED, comm_ms * (1.0 - overlap),
                          f"{ms(comm_ms)} of NCCL kernels, {format_value(100.0 * overlap)} % overlapped by compute; a "
                          "kernel's time includes its wait for the other ranks"))
    if copies:
        parts.append(Part("copies", sum(copies.values()), ", ".join(f"{k} {ms(v)}" for k, v in copies.items())))
    causes = idle_causes(point)
    if idle_pct is not None:
        parts = fit_to_busy(parts, window * (1.0 - idle_pct / 100.0))
        parts.append(Part(IDLE, window * idle_pct / 100.0, f"{format_value(idle_pct)} % of the window: " + (
            "; ".join(f"{r.cause} {format_value(r.pct_of_idle)} %" + (f" at {short(r.at)}" if r.at else "")
                      for r in causes.itertuples()) if causes is not None and not causes.empty else
            "the GPU waited for the host (launches, synchronisation, input)")))
    fixes = []
    for name, value in sorted(comm.items(), key=lambda kv: -kv[1]):
        exposed = min(value * (1.0 - overlap), compute_ms)
        fixes.append(Fix(f"overlap the {name.removeprefix('nccl.')} with compute "
                         f"({format_value(100.0 * overlap)} % overlapped now)", exposed,
                         "its exposed time, at most the compute to hide it behind", EXPOSED))
    to_bound, said = rate_fixes(point, bounds)
    collective_bound, collective_said = collective_fixes(point, bounds, step)
    fixes += to_bound + collective_bound
    said += collective_said
    fixes += copy_fixes(copies)
    if idle_pct and causes is not None and not causes.empty:
        fixes += [Fix(f"{r.cause}: {r.fix.rpartition(': saves up to')[0]}", window * idle_pct / 100.0 * r.pct_of_idle / 100.0,
                      f"the idle time of this cause ({format_value(r.pct_of_idle)} % of the idle)", IDLE)
                  for r in causes.itertuples()]
    elif idle_pct:
        fixes.append(Fix("keep the GPU fed (CUDA graphs or fewer launches, no synchronisation in the step, a "
                         "faster input pipeline)", window * idle_pct / 100.0, "the idle time", IDLE))
    slow = stragglers[(stragglers["point"] == point.label) & stragglers["above_noise"]] \
        if not stragglers.empty else stragglers
    for _, row in slow.iterrows():
        carved = carve_imbalance(parts, int(row["rank"]), float(row["excess_ms"]))
        parts, fixes = carved, scaled_fixes(fixes, parts, carved)
        fixes.append(Fix(f"balance rank {int(row['rank'])}'s work", float(row["excess_ms"]),
                         "its mean excess over the median rank"))
    if step_ms - window > 0:
        parts.append(Part(OUTSIDE, step_ms - window,
                          f"the step's time beyond the window's {ms(window)} per step: not profiled", observed=False))
    elif window - step_ms > 0:
        fitted = fit_to_step(parts, step_ms, window)
        parts, fixes = fitted, scaled_fixes(fixes, parts, fitted)
    measured_step = None
    unprofiled = point.metric(c.PROFILER_UNPROFILED_STEP)
    if unprofiled is not None and 0.0 < unprofiled < step_ms:
        parts, fixes = rebased(parts, fixes, unprofiled)
        measured_step, step_ms = step_ms, unprofiled
    noise = iteration_noise(point, series)
    kept = sorted((f for f in fixes if f.saves_ms > noise), key=lambda f: -f.saves_ms)
    return Diagnosis(point.label, step_ms, step.source, parts, kept, noise, len(fixes) - len(kept), said,
                     measured_step)


def fit_to_busy(parts: list[Part], busy: float) -> list[Part]:
    """The GPU-busy parts scaled to the GPU's busy time per step (`busy`: the window less its idle)
    where their sum is larger (kernels running at once on several streams), so that with the idle
    they sum to the window; each scaled part keeps its sum of kernel times in its detail."""
    total = sum(p.ms for p in parts if p.name in BUSY)
    if busy <= 0.0 or total <= busy * (1.0 + 1e-9):
        return parts
    factor = busy / total
    return [replace(p, ms=p.ms * factor, detail=f"{p.detail}; {ms(p.ms)} of kernel time, {format_value(100 * factor)} % "
                    "of it counted: kernels ran at once on several streams".lstrip("; "))
            if p.name in BUSY else p for p in parts]


def carve_imbalance(parts: list[Part], rank: int, excess: float) -> list[Part]:
    """The straggler's excess as a part of its own, taken out of the exposed communication (the
    others wait for it inside their collectives' kernels), at most all of it, so that the parts keep
    their sum."""
    exposed = next((p for p in parts if p.name == EXPOSED), None)
    seen = min(excess, exposed.ms) if exposed is not None else 0.0
    if seen <= 0.0:
        return parts
    detail = f"rank {rank} slower than the median rank by {ms(excess)}; the others' wait for it, out of the exposed communication"
    return [replace(p, ms=p.ms - seen) if p is exposed else p for p in parts] + [Part(IMBALANCE, seen, detail)]


def fit_to_step(parts: list[Part], step: float, window: float) -> list[Part]:
    """The parts of a window per iteration longer than the counted step (a workload that times less
    than the whole iteration: the time between its counted iterations is in the window) fitted to the
    step, so that they sum to it: the GPU idle gives up the excess first (the host's time between the
    counted iterations), the GPU-busy parts the rest, in proportion."""
    excess = window - step
    idle = next((p for p in parts if p.name == IDLE), None)
    from_idle = min(excess, idle.ms) if idle is not None else 0.0
    rest = excess - from_idle
    busy = sum(p.ms for p in parts if p.name in BUSY)
    factor = max(0.0, 1.0 - rest / busy) if busy else 1.0
    between = f"{ms(excess)} per iteration of the window fell between the counted steps"
    out = []
    for part in parts:
        if part is idle and from_idle:
            part = replace(part, ms=part.ms - from_idle, detail=f"{part.detail}; {between}, taken out of the idle")
        elif part.name in BUSY and rest > 0.0:
            part = replace(part, ms=part.ms * factor, detail=f"{part.detail}; scaled to the step ({between})")
        out.append(part)
    return out


def copy_fixes(copies: dict[str, float]) -> list[Fix]:
    """The fixes of the copies per step (ms by category): pinned memory and non_blocking for the
    host↔device memcpys only, fewer or fused kernels for the copies on the device and the memsets."""
    fixes = []
    if host := copies.get(HOST_COPIES, 0.0):
        fixes.append(Fix("remove or overlap the host↔device copies (pinned memory, non_blocking, fewer host round "
                         "trips)", host, "their time"))
    if device := sum(v for k, v in copies.items() if k != HOST_COPIES):
        fixes.append(Fix("remove the copies on the device (fewer .contiguous() calls, layout changes, concatenations "
                         "and memsets; fuse them into their neighbours)", device, "their time"))
    return fixes


def rebased(parts: list[Part], fixes: list[Fix], unprofiled: float) -> tuple[list[Part], list[Fix]]:
    """The parts and fixes on the unprofiled step (the module's rule): GPU idle max(0, unprofiled −
    busy), the exposed communication less the busy parts' excess over the unprofiled step, the part
    outside the window gone (the unprofiled step is the parts'); each fix of a changed part scaled
    with it."""
    busy = sum(p.ms for p in parts if p.name in BUSY)
    excess = max(0.0, busy - unprofiled)
    new: dict[str, float] = {}
    for part in parts:
        if part.name == IDLE:
            new[IDLE] = max(0.0, unprofiled - busy)
        elif part.name == EXPOSED:
            new[EXPOSED] = max(0.0, part.ms - excess)
    out = [replace(p, ms=new[p.name], measured_ms=p.ms) if p.name in new and new[p.name] != p.ms else p
           for p in parts if p.name != OUTSIDE]
    return out, scaled_fixes(fixes, parts, out)


def scaled_fixes(fixes: list[Fix], before: list[Part], after: list[Part]) -> list[Fix]:
    """Each fix of a part whose time changed from `before` to `after`, scaled with it."""
    old, new = {p.name: p.ms for p in before}, {p.name: p.ms for p in after}
    return [replace(f, saves_ms=f.saves_ms * new[f.part] / old[f.part])
            if f.part in new and old.get(f.part) and new[f.part] != old[f.part] else f for f in fixes]


def diagnoses(points: list[Point]) -> list[Diagnosis]:
    """Every point's diagnosis (points without a step time or GPU categories left out)."""
    bounds, series = rates(points), sweep.per_iteration(points)
    stragglers = sweep.persistent_stragglers(points)
    return [d for p in points if (d := diagnose(p, bounds, stragglers, series)) is not None]


def sentence(d: Diagnosis) -> str:
    """`bf16: limited by compute: 68 % of the 1.40 ms step (...); then ...`."""
    limiter = d.limiter
    others = [p for p in sorted(d.parts, key=lambda p: -p.ms) if p is not limiter and p.ms > d.noise_ms and p.observed]
    unseen = [p for p in d.parts if not p.observed and p.ms > d.noise_ms]
    if limiter is None:
        return f"{d.point}: nothing to diagnose."
    step = f"{ms(d.step_ms)} step" if d.measured_step_ms is None else \
        f"{ms(d.step_ms)} step without the profiler ({ms(d.measured_step_ms)} as measured)"
    text = (f"{d.point}: limited by {limiter.name}: {ms(limiter.ms)} ({share(limiter.ms, d.step_ms)}) of the "
            f"{step} ({limiter.detail})")
    if others:
        text += "; then " + ", ".join(f"{p.name} {ms(p.ms)} ({share(p.ms, d.step_ms)})" for p in others)
    if unseen:
        text += "; " + ", ".join(f"{p.name}: {ms(p.ms)} ({share(p.ms, d.step_ms)})" for p in unseen)
    if changed := [p for p in d.parts if p.measured_ms is not None]:
        text += "; as measured under the profiler: " + ", ".join(
            f"{p.name} {ms(p.measured_ms)} ({share(p.measured_ms, d.measured_step_ms or d.step_ms)})"
            for p in changed if p.measured_ms is not None)
    if d.rates:
        text += "; rates: " + "; ".join(d.rates)
    return text + "."


def fix_lines(d: Diagnosis, top: int = TOP) -> list[str]:
    """The point's top fixes, largest bound first, each with its bound per step ('' numbering: the
    caller numbers them)."""
    return [f"{f.action}: ≤ {ms(f.saves_ms)} of {ms(d.step_ms)} per step ({f.basis})" for f in d.fixes[:top]]


def noise_line(d: Diagnosis) -> str:
    """What was left out as noise ('' when nothing was)."""
    if not d.fixes:
        return f"no fix saves more than the noise ({ms(d.noise_ms)} per step)"
    return f"({d.dropped} smaller fix(es) below the noise of {ms(d.noise_ms)} per step left out)" if d.dropped else ""


def diagnosis_table(found: list[Diagnosis]) -> pd.DataFrame:
    """One row per point: step, limiter, the parts per step and the noise (the fixes are listed above it)."""
    rows = []
    for d in found:
        limiter = d.limiter
        row: dict[str, object] = {"point": d.point, "step (ms)": d.step_ms, "the step": d.step_source,
                                  "limited by": limiter.name if limiter else ""}
        row.update({f"{p.name} (ms)": p.ms for p in d.parts})
        if d.measured_step_ms is not None:
            row["step as measured (ms)"] = d.measured_step_ms
            row.update({f"{p.name} as measured (ms)": p.measured_ms for p in d.parts if p.measured_ms is not None})
        row["noise (ms)"] = d.noise_ms
        rows.append(row)
    return pd.DataFrame(rows)


def print_diagnoses(infos: list[RunInfo], out: Console) -> None:
    """The terminal report's first block: per point what limits it and its top fixes (runs of one
    workload with metrics; nothing otherwise)."""
    collected = [i for i in infos if i.metrics]
    if not collected or len({i.kind for i in collected}) > 1:
        return
    found = diagnoses(sweep.sweep_points(collected, None))
    if not found:
        return
    out.rule("[bold]what limits each point[/] (upper bounds per step; noise left out)")
    for d in found:
        out.print(rich_text(sentence(d)))
        for i, line in enumerate(fix_lines(d), start=1):
            out.print(rich_text(f"  {i}. {line}"))
        if said := noise_line(d):
            out.print(rich_text("  " + said))
