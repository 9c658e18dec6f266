"""The profiler's perturbation of each step, from one of two baselines:

- in the run (catalog.PROFILER_SLOWDOWN, `in_run`): the same process's steps the profiler did
  not touch, else those of the unprofiled reference run in the same job (profile.reference), per
  rank, with a 95 % interval (hpcprof.analysis.steps.perturbation); the first choice wherever the
  run has them;
- another run (catalog.PROFILER_OVERHEAD, `overheads`): a profiled run's median step time
  (iteration.median) against that of the same experiment's run under `profile.tool: none`
  (a `tool` sweep, or a repetition with `--set profile.tool=none`), both timed the same way: a
  `command`'s step hook, seqpar's and ddp's own timers.

The baseline is a run of the same experiment and sweep point but for the tool (same workload,
ranks, site, window and other parameters), found among the runs compared and the other runs of
the experiment's directory; with several (repetitions), the mean of their medians. The unprofiled
ranks of a profiled run are no baseline: the ranks of a data-parallel program wait for one
another every step, so they move at the profiled ranks' pace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcprof.config import REPEAT
from hpcprof.core import catalog as c
from hpcprof.run.record import ProfileRecord, RunRecord, read_record
from hpcprof.run.results import Metric, read_headline
from hpcprof.run.rundir import DamagedRunFile, RunDir

#: the sweep parameters that may differ between a run and its baseline
IGNORED_PARAMS = ("profile.tool", REPEAT)
#: what the perturbation means for a tool's numbers (a tracing profiler, where none is named)
MEANING = {"ncu": "ncu serialises and replays each kernel: only its per-kernel metrics hold",
           "": "host-side and launch-bound numbers are inflated; kernel durations are not"}


#: what slowed the window's steps of a run under `profile.tool: none` with `profile.memory`
MEMORY_HISTORY = "PyTorch's memory history (profile.memory)"
#: the per-rank slowdowns a sentence names before it says how many more there are
RANKS_SHOWN = 4


@dataclass(frozen=True)
class Overhead:
    """A profiled run's median step against its baseline's, with the 95 % interval of the
    slowdown and each rank's (rank, slowdown %, low, high) where the baseline is in the run."""

    tool: str
    step_ms: float
    baseline_ms: float
    against: str                    # what the baseline is
    low: float | None = None
    high: float | None = None
    ranks: tuple[tuple[int, float, float, float], ...] = ()
    per_rank: bool = False      # in the run: pct is the most slowed rank's, baseline_ms the ranks' median
    options: tuple[str, ...] = ()   # the costly options the run's profiler had on (costly_options)

    @property
    def pct(self) -> float:
        return 100.0 * (self.step_ms / self.baseline_ms - 1.0)

    @property
    def warning(self) -> bool:
        return self.pct > c.OVERHEAD_WARN_PCT

    def sentence(self) -> str:
        """What the report, compare, status and the HTML say about it."""
        interval = f" (95 % CI {self.low:+.1f} to {self.high:+.1f} %)" if self.low is not None and self.high is not None \
            else ""
        against = f"median step {self.step_ms:,.3g} ms against {self.baseline_ms:,.3g} ms {self.against}" \
            if not self.per_rank else f"the ranks' median unprofiled step {self.baseline_ms:,.3g} ms {self.against}"
        if self.ranks:
            shown = "; ".join(f"rank {r} {p:+.1f} % [{lo:+.1f}, {hi:+.1f}]" for r, p, lo, hi in self.ranks[:RANKS_SHOWN])
            more = len(self.ranks) - RANKS_SHOWN
            against += f"; per rank: {shown}" + (f" and {more} more (steps_perturbation)" if more > 0 else "")
        options = f"; costly options on: {', '.join(self.options)} (what each costs: docs/user-guide/report.md)" \
            if self.options else ""
        if self.warning:
            return (f"{self.tool} slowed each step by {self.pct:.0f} %{interval}: "
                    f"{MEANING.get(self.tool, MEANING[''])} ({against}){options}")
        return (f"{self.tool} changed each step by {self.pct:+.1f} %{interval}, within {c.OVERHEAD_WARN_PCT:g} % "
                f"({against}){options}")


def costly_options(profile: ProfileRecord) -> tuple[str, ...]:
    """The options of the run's profiler that are off by default for their cost (docs/user-guide/report.md's
    table) and were on in the run; an nsys field left to nsys's own default (null) counts as on."""
    history = ("memory history (profile.memory)",) if profile.memory and profile.tool != "none" else ()
    if profile.tool == "nsys":
        nsys = profile.nsys
        found = [f"{trace} tracing" for trace in nsys.trace if trace not in ("cuda", "nvtx", "none")]
        found += [f"{label} ({'nsys default' if value is None else value})"
                  for label, value in (("CPU sampling", nsys.sample), ("context switch tracing", nsys.cpuctxsw))
                  if value != "none"]
        found += [label for label, value in (("CUDA event tracing", nsys.cuda_event_trace),
                                             ("GPU context switch tracing", nsys.gpuctxsw),
                                             ("Python sampling", nsys.python_sampling)) if value]
        return tuple(found) + history
    if profile.tool == "torch":
        torch = profile.torch
        return tuple(label for label, on in (("operator shapes", torch.record_shapes),
                                             ("Python stacks", torch.with_stack), ("memory", torch.profile_memory)) if on) + history
    return history


#: what an in-run baseline is, by steps_perturbation's `baseline` (hpcprof.analysis.steps)
AGAINST = {"same process": "in the same processes' steps outside the profiler's",
           "reference run": "in the job's unprofiled reference run of the same workload (profile.reference)"}


def in_run(tool: str, metrics: list[Metric], ranks: tuple[tuple[int, float, float, float], ...] = (),
           baseline: str = "same process") -> Overhead | None:
    """The slowdown measured in the run's own job (its headline's profiler.slowdown_pct and
    profiler.unprofiled_step) against `baseline`'s steps, None where it has none."""
    values = {name: value for name, value, _ in metrics}
    if c.PROFILER_SLOWDOWN.name not in values or c.PROFILER_UNPROFILED_STEP.name not in values:
        return None
    unprofiled = values[c.PROFILER_UNPROFILED_STEP.name]
    return Overhead(tool, unprofiled * (1.0 + values[c.PROFILER_SLOWDOWN.name] / 100.0), unprofiled,
                    f"{AGAINST.get(baseline, AGAINST['same process'])}; the slowdown is the most slowed rank's",
                    values.get(c.PROFILER_SLOWDOWN_LOW.name), values.get(c.PROFILER_SLOWDOWN_HIGH.name), ranks,
                    per_rank=True)


def _point(record: RunRecord) -> tuple[Any, ...]:
    """What a run and its baseline share."""
    exp = record.experiment
    params = {k: v for k, v in record.sweep_point.params.items() if k not in IGNORED_PARAMS}
    return (exp.name, exp.workload, record.world_size, record.ranks_per_node, record.site.name,
            exp.profile.window, sorted(params.items(), key=lambda kv: kv[0]))


def median_step(metrics: list[Metric]) -> float | None:
    return next((value for name, value, _ in metrics if name == c.ITERATION_MEDIAN.name and value > 0), None)


def overheads(runs: list[tuple[RunDir, RunRecord, list[Metric]]]) -> dict[str, Overhead]:
    """By run id: the overhead of each profiled run of `runs` (run, record, headline metrics) that
    has a baseline among `runs` or the other collected runs of its experiment's directory."""
    known: dict[Path, tuple[RunRecord | None, list[Metric]]] = {run.path: (record, metrics) for run, record, metrics in runs}
    out: dict[str, Overhead] = {}
    for run, record, metrics in runs:
        step = median_step(metrics)
        if record.tool == "none" or step is None:
            continue
        for sibling in sorted(run.path.parent.glob("*/config.json")):
            if sibling.parent not in known:
                known[sibling.parent] = _sibling(sibling.parent)
        point = _point(record)
        base = [(path.name, ms) for path, (other, found) in sorted(known.items())
                if other is not None and other.tool == "none" and (ms := median_step(found)) is not None
                and _point(other) == point]
        if base:
            out[run.run_id] = Overhead(record.tool, step, sum(ms for _, ms in base) / len(base),
                                       f"under profile.tool: none ({', '.join(name for name, _ in base)})")
    return out


def _sibling(path: Path) -> tuple[RunRecord | None, list[Metric]]:
    """A run of the experiment's directory: its record and collected headline (none: not a baseline)."""
    headline = read_headline(path)
    if headline is None:
        return None, []
    try:
        return read_record(path / "config.json"), headline.metrics
    except DamagedRunFile:
        return None, []


def overhead_metric(overhead: Overhead) -> Metric:
    return c.PROFILER_OVERHEAD.value(overhead.pct)


def unmeasured(tool: str) -> str:
    """What a profiled run without a baseline says instead ('' for an unprofiled run)."""
    if tool in ("none", ""):
        return ""
    return (f"the slowdown {tool} caused is not measured: the run has no unprofiled steps of its own (torch.profiler "
            "under the step hook or seqpar's loop) nor of a reference run in its job (profile.reference), and its "
            "experiment no run under profile.tool: none to compare with")
