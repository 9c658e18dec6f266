"""The runs a report or comparison is about: selected by run id, run directory or sweep id, each
with its state and the headline collect recorded (hpcprof.run.results.read_headline). Without pandas:
`hpcprof report` of collected runs reads small notes only; the headline is computed from the
tables (hpcprof.analysis.summary) only where collect recorded none (a run collected by an older
hpcprof, a damaged note)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcprof.core.errors import UserError
from hpcprof.run.record import RunRecord, read_record
from hpcprof.run.results import Metric, TopKernel, list_tables, read_headline
from hpcprof.run.rundir import RunDir, all_runs, latest_sweep
from hpcprof.run.rundir import select_runs as rundir_select

if TYPE_CHECKING:
    from hpcprof.report.overhead import Overhead


@dataclass
class RunInfo:
    """One selected run: its directory, record, state, headline metrics and top kernels (most
    GPU time first)."""

    run: RunDir
    record: RunRecord
    state: str
    reason: str = ""
    metrics: list[Metric] = field(default_factory=list)
    top: list[TopKernel] = field(default_factory=list)
    overhead: Overhead | None = None    # the profiler's perturbation of each step (hpcprof.report.overhead)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.record.sweep_point.params)

    @property
    def kind(self) -> str:
        return self.record.kind

    @property
    def tool(self) -> str:
        return self.record.tool


def select_runs(refs: tuple[str, ...], workdir: Path) -> list[RunDir]:
    """Runs named by run id, run directory or sweep id (all its points); default: the latest sweep."""
    if not refs:
        runs = all_runs(workdir)
        if not runs:
            raise UserError(f"no runs under {workdir}; submit a sweep first (hpcprof submit EXP --site S)")
        refs = (latest_sweep(runs),)
    return rundir_select(refs, workdir)


def load(runs: list[RunDir], require_collected: bool = True, one_workload: bool = True) -> list[RunInfo]:
    """Each run's state and headline; every completed run must be collected, and with
    `one_workload` all runs must run the same workload kind."""
    from hpcprof.analysis.forensics.verdict import explained
    from hpcprof.campaign.jobstate import recorded_state

    infos = []
    for run in runs:
        state = explained(run, recorded_state(run))  # read-only: no scheduler is asked
        info = RunInfo(run, read_record(run), state.state, state.reason)
        collected = bool(list_tables(run.path))
        if not collected and require_collected and state.state == "COMPLETED":
            raise UserError(f"run {run.run_id} is not collected; run `hpcprof collect {run.run_id}` first")
        if collected:
            headline = read_headline(run.path)
            if headline is None:
                from hpcprof.analysis.summary import run_headline

                headline = run_headline(run.path, info.record)
            info.metrics, info.top = headline
        infos.append(info)
    add_overheads(infos)
    kinds = sorted({i.kind for i in infos})
    if one_workload and len(kinds) > 1:
        raise UserError(f"the selection mixes workloads {', '.join(kinds)}; compare runs of one workload "
                        "(name one sweep or the runs of one experiment)")
    return infos


def add_overheads(infos: list[RunInfo]) -> None:
    """The profiler's perturbation of each step of the profiled runs that have a baseline
    (hpcprof.report.overhead), as RunInfo.overhead: the run's own unprofiled steps first, else
    a run under profile.tool: none (and its metric)."""
    from hpcprof.report.overhead import MEMORY_HISTORY, costly_options, in_run, overhead_metric, overheads

    for info in infos:
        if info.record.experiment.profile.observed:
            ranks, baseline = rank_slowdowns(info.run.path)
            info.overhead = in_run(info.tool if info.tool != "none" else MEMORY_HISTORY, info.metrics, ranks, baseline)
    found = overheads([(i.run, i.record, i.metrics) for i in infos if i.metrics and i.overhead is None])
    for info in infos:
        if (overhead := found.get(info.run.run_id)) is not None:
            info.overhead = overhead
            info.metrics.append(overhead_metric(overhead))
        if info.overhead is not None:
            info.overhead = replace(info.overhead, options=costly_options(info.record.experiment.profile))


def rank_slowdowns(path: Path) -> tuple[tuple[tuple[int, float, float, float], ...], str]:
    """Each rank's (rank, slowdown %, low, high) from the run's steps_perturbation table, the most
    slowed first, and the most slowed rank's baseline (read with pandas only where the run has one)."""
    from hpcprof.core.catalog import STEPS_PERTURBATION
    from hpcprof.run.results import read_table

    table = read_table(path, STEPS_PERTURBATION.name) if STEPS_PERTURBATION.name in list_tables(path) else None
    if table is None or table.empty:
        return (), ""
    table = table.sort_values("slowdown_pct", ascending=False, kind="stable")
    ranks = tuple((int(r), float(p), float(lo), float(hi)) for r, p, lo, hi in
                  zip(table["rank"], table["slowdown_pct"], table["low_pct"], table["high_pct"], strict=True))
    return ranks, str(table["baseline"].iloc[0]) if "baseline" in table else ""
