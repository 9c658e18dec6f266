"""Collect finished runs, one run at a time (the engine it runs on is hpcprof.core.pool):
workload results, a manifest of logs and profiles, and each profile tool's analysis, into
`results/<table>.parquet` (hpcprof.run.results) and the run's typed summary in the campaign store.
Collecting twice changes nothing. This module runs the steps of a run and of many runs; the steps
are collect.files (a run's files), collect.mapping with collect.cache (the map of the rank files)
and collect.reduce (the run's tables and the cross-rank steps).

Isolation: every run and every file is collected on its own; one that cannot be read is a
`Problem` (hpcprof.core.errors: the file and why), reported in one line and recorded (`collect_status
= partial`, exit status 3), the rest is collected. Whatever the cause (a damaged export, an export
nsys could not make or no nsys to make it, a directory or a symlink loop named like a rank file,
a worker that died), it is a Problem value handed to `Collected.report`, never a log line matched
for words. Rank files (nsys exports, ncu CSVs, torch traces) are analysed per file in parallel by
their tool's ToolCollector (which the profiler table, hpcprof.profilers, names), in a process pool
or `mpi4py.futures` workers when launched under `mpiexec -n N python -m mpi4py.futures -m hpcprof
collect`: a worker analyses several rank files a task and writes their tables into one bundle in
`derived/<tool>/parts/`; the run's tables are concatenated from those parts, the cross-rank tables
reduced and the summary computed in the workers too, so this process's memory does not grow with
the number of ranks. Files unchanged since the last collect (size and mtime) are skipped while their
cached parts read; a damaged part is made again. Temporary files a killed collect left behind are
removed. What is the tool's own (what its missing profiles mean, its steps over the whole run such
as Echo's slowdown) are hooks of its collector: collect names no tool.
"""
from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from hpcprof import profilers
from hpcprof.campaign.store import Store
from hpcprof.collect.cache import part_key
from hpcprof.collect.common import gc_paused, short
from hpcprof.collect.files import ceilings_tables, loop_perturbation_tables, manifest, rank_files, workload_tables
from hpcprof.collect.mapping import map_files
from hpcprof.collect.reduce import DamagedCache, SliceConcat, reduce_parts
from hpcprof.core import catalog as c
from hpcprof.core.atomic import remove_stale_temps
from hpcprof.core.catalog import table_name
from hpcprof.core.errors import Problem, WorkerDied
from hpcprof.core.pool import InProcess, Log, make_executor
from hpcprof.core.safe_paths import check_confined
from hpcprof.run.record import read_record
from hpcprof.run.results import ResultError, forget_headline, write_headline, write_table
from hpcprof.run.rundir import RunDir

if TYPE_CHECKING:
    import pandas as pd

#: exit status of `hpcprof collect` when something was skipped (the rest is collected)
EXIT_PARTIAL = 3


@dataclass
class Collected:
    """What collecting one run gave: table names written, and every Problem (each also logged)."""

    run_id: str
    log: Log = print
    tables: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    #: wall seconds per phase of collecting the run, in the order they ran ("... (during map)":
    #: this process's own steps while the workers analysed the rank files)
    seconds: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    def report(self, problem: Problem) -> None:
        """Record one Problem of the run: the run is then `partial` (collect exits 3)."""
        self.problems.append(problem)
        self.log(f"{self.run_id}: {problem}")

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Add the block's wall time to `phase` (Timed)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start

    def timing(self) -> str:
        """The run's wall time so far and its phases' for the log: "2.41 s (map 1.90, concat 0.30, ...)"."""
        phases = ", ".join(f"{phase} {seconds:.2f}" for phase, seconds in self.seconds.items() if seconds >= 0.005)
        return f"{time.perf_counter() - self.started:.2f} s ({phases})"


def collect_run(run: RunDir, store: Store, log: Log = print, executor: Executor | None = None) -> Collected:
    """Collect one run; every step is isolated, problems are returned and recorded. The profile's
    steps are its tool's collector's (hpcprof.profilers names it): the map and reduce of its rank
    files, what its missing profiles mean, and its steps over the whole run (nsys: Echo's slowdown)."""
    from hpcprof.analysis.collector import CollectContext, RunStep, ToolCollector
    from hpcprof.analysis.forensics.verdict import forensics_tables
    from hpcprof.analysis.registry import collector

    done = Collected(run.run_id, log)
    executor = executor or InProcess()
    check_confined(run.path, "results", "derived")  # nothing written or deleted through a link out of the run
    for directory in (run.path / "results", run.path / "derived"):
        remove_stale_temps(directory)  # what a killed collect was writing
    forget_headline(run.path)  # until the summary step records the new tables' headline

    def step(label: str, fn: Callable[[], None], timed: bool = True) -> None:
        """fn() as phase `label` (`timed`: False where fn times its own phases)."""
        try:
            with done.timed(label) if timed else contextlib.nullcontext():
                fn()
        except Exception as exc:  # one step failing never stops the others
            done.report(Problem(None, f"{label}: {short(exc)}"))

    def save(source: str, tables: dict[str, pd.DataFrame]) -> None:
        for name, df in tables.items():
            try:
                write_table(run.path, table_name(source, name), df)
                done.tables.append(table_name(source, name))
            except (ResultError, ValueError, TypeError, OSError) as exc:
                done.report(Problem(None, f"{source}_{name}: not written ({short(exc)})"))

    record = read_record(run)  # an unreadable config.json fails the run (the caller reports it)
    tool = record.tool
    profile_dir = run.path / "profiles" / tool

    @functools.cache
    def tool_paths() -> dict[str, str]:
        """The site's program of the run's tool, by tool name (none for a tool without one)."""
        program = profilers.get(tool).program_in(msgspec.structs.asdict(record.site.paths))
        return {tool: program} if program is not None else {}

    @functools.cache
    def tool_collector() -> ToolCollector | None:
        """The collector of the run's tool (None: a tool with nothing to collect, none)."""
        return collector(tool, tool_paths()) if profilers.get(tool).collector is not None else None

    ranks_checked = False

    def checked(files: dict[str, int]) -> dict[str, int]:  # the rank set: one Problem line, the files used
        nonlocal ranks_checked
        ranks_checked = True
        found = tool_collector()
        if found is None:
            return files
        files, line = found.check_ranks(run.path, record, files)
        if line is not None:
            done.report(Problem(None, line))
        return files

    def missing() -> None:  # a tool that names the profiled ranks of a run without any profile file (nsys)
        found = tool_collector()
        if found is not None and found.check_without_files and not ranks_checked:
            checked({})

    own_steps_done = False

    def own_steps(during: str = "") -> None:
        """This process's own light steps, once: while the workers analyse the rank files (`during`
        the map phase), else on their own."""
        nonlocal own_steps_done
        if own_steps_done:
            return
        own_steps_done = True
        suffix = f" (during {during})" if during else ""
        step("workload" + suffix, workload)
        step("ceilings" + suffix, lambda: save(c.BENCH, ceilings_tables(run.path, done.report)))
        step("files" + suffix, lambda: save(c.FILES, {c.FILES_MANIFEST.key: manifest(run)}))
        step("profiles" + suffix, missing)
        step("forensics" + suffix, lambda: save(c.FORENSICS, forensics_tables(run)))
        step("steps" + suffix, steps)

    def workload() -> None:
        """The workload's JSON results; a seqpar or ddp run's profiler slowdown in its own loop."""
        tables = workload_tables(run.path / "results", done.report)
        save(c.WORKLOAD, tables)
        if record.kind in c.WORKLOAD_TIMINGS:
            save(c.STEPS, loop_perturbation_tables(run.path / "results", record.kind, tables, done.report))

    def steps() -> None:
        """The step hook's records (profile.window.auto on a `command`): its table, or why there is none."""
        from hpcprof.analysis.memory import snapshot_tables
        from hpcprof.analysis.steps import steps_tables
        from hpcprof.campaign.jobstate import recorded_state

        tables, problems = steps_tables(run.path, record.world_size)
        snapshots, unread = snapshot_tables(run.path)        # profile.memory's
        tables, problems = {**tables, **snapshots}, problems + unread
        for line in problems:
            done.report(Problem(None, f"steps: {line}"))
        save(c.STEPS, tables)
        window = record.experiment.profile.window
        if not tables and window.hooked(record.kind) and recorded_state(run).state == "COMPLETED":
            log(f"{run.run_id}: note: the step hook saw no optimizer step on any rank (a program without "
                "torch.optim): the window is the program's own NVTX range (profile.window.nvtx) or the whole capture")

    def profiles() -> None:
        with done.timed("inputs"), gc_paused():
            files = rank_files(profile_dir, done.report)
        found = tool_collector()
        if files or (found is not None and found.check_without_files):
            files = checked(files)
        if not files:
            log(f"{run.run_id}: no {tool} profiles in {profile_dir}")
            return
        ctx = CollectContext(run_dir=run.path, tool=tool, files=list(files), rank_of=files,
                             work_dir=run.path / "derived" / tool, log=log, problem=done.report)
        ctx.work_dir.mkdir(parents=True, exist_ok=True)
        with done.timed("inputs"), gc_paused():
            inputs = collector(tool, tool_paths()).inputs(ctx)
        keys = [key for _, key in sorted((rank, part_key(path)) for path, rank in inputs.items())]
        concat = SliceConcat(tool, run.path, keys, executor)     # concatenates slices as the map goes
        with done.timed("map"):
            mapped = map_files(tool, inputs, run.path, executor, log, done.report, tool_paths(),
                               meanwhile=functools.partial(own_steps, "map"), on_file=concat.file_done)
        if any(part.tables for part in mapped.values()):
            try:
                done.tables.extend(reduce_parts(tool, run.path, mapped, executor, log, done.timed, concat))
            except DamagedCache as exc:
                log(f"{run.run_id}: {exc}; made again")
                with done.timed("map"):
                    mapped = map_files(tool, inputs, run.path, executor, log, done.report, tool_paths())
                done.tables.extend(reduce_parts(tool, run.path, mapped, executor, log, done.timed))
        elif mapped:
            log(f"{run.run_id}: {tool}: nothing to analyse in its profiles")
        else:
            done.report(Problem(profile_dir, f"no usable {tool} profile"))

    if tool != "none" and profile_dir.is_dir():
        step(tool, profiles, timed=False)   # its phases: inputs, map, concat, join, cross-rank
    own_steps()                             # when there was no map to overlap

    def run_steps() -> Mapping[str, RunStep]:
        try:
            found = tool_collector()
        except Exception:  # no collector to be had: the `profiles` step reported why
            return {}
        return found.run_steps() if found is not None else {}

    def run_step(name: str, make: RunStep) -> None:
        save(name, make(run.path, record, log))

    for name, make in run_steps().items():   # the tool's steps over the whole run (nsys: `echo`)
        step(name, functools.partial(run_step, name, make))

    def summary() -> None:
        from hpcprof.analysis.summary import run_headline

        # in a worker: the summary reads whole-run tables, which this process never holds
        headline = executor.submit(run_headline, run.path, record).result()
        write_headline(run.path, headline)
        if store.has_run(run.run_id):
            store.replace_metrics(run.run_id, headline.metrics)

    step("summary", summary)
    if store.has_run(run.run_id):  # a run directory copied in from elsewhere has no record to update
        mark_collected(run, store, [str(p) for p in done.problems])
    return done


def mark_collected(run: RunDir, store: Store, problems: list[str]) -> None:
    """Record in the store how the run was collected, and note it in the run directory (which
    `status` reads, so that it need not open the store)."""
    store.mark_collected(run.run_id, problems)
    run.store_collect(problems)


def _worker_modules() -> list[str]:
    """What a worker imports before its first task: this module (the map's and reduce's), the summary
    and every built-in tool's collector."""
    return [__name__, "hpcprof.analysis.summary",
            *(p.collector.partition(":")[0] for p in profilers.BUILTIN.values() if p.collector)]


def collect_runs(selected: list[RunDir], store: Store, refresh: Callable[[RunDir], Any], log: Log,
                 workers: int | None = None) -> int:
    """Collect every terminal run of `selected`, each isolated; returns the exit status
    (0, or EXIT_PARTIAL when a run had a Problem or could not be collected)."""
    skipped = False
    executor, how = make_executor(workers, _worker_modules())
    log(f"collect: rank files analysed by {how}")
    try:
        for run in selected:
            try:
                _ = run.config_json  # a run that cannot be read (damaged, no permission) is named, never "not yet"
                state = refresh(run)
                if not state.terminal:
                    log(f"{run.run_id}: {state.state}, not collected yet")
                    continue
                result = collect_run(run, store, log=log, executor=executor)
            except Exception as exc:  # this run only: the others are still collected
                skipped = True
                log(f"{run.run_id}: not collected ({short(exc)})")
                try:
                    if store.has_run(run.run_id):
                        mark_collected(run, store, [f"not collected: {short(exc)}"])
                except Exception:  # the store itself is unusable: the line above says enough
                    pass
                continue
            skipped |= bool(result.problems)
            if any(isinstance(p, WorkerDied) for p in result.problems):
                executor.shutdown(wait=False)   # the pool is broken: a new one for the next runs
                executor, how = make_executor(workers, _worker_modules())
            status = f"partially, {len(result.problems)} problem(s)" if result.problems else state.state
            log(f"collected {run.run_id} ({status}) -> {run.path / 'results'} ({len(result.tables)} tables) "
                f"in {result.timing()}")
    finally:
        executor.shutdown()
    return EXIT_PARTIAL if skipped else 0
