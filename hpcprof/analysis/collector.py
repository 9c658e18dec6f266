"""The interface every profiling tool implements for `hpcprof collect` (nsys, ncu, torch).

A tool's collector is one `ToolCollector` subclass that its entry in the profiler table
(hpcprof.profilers) names; collect runs its steps and names no tool itself:

- `inputs(ctx)`: the run's files to analyse (paths as text, as `ctx.files`), with their ranks
  (e.g. nsys exports .nsys-rep); a file it cannot use is a Problem handed to `ctx.problem`, the
  others go on.
- `analyse_file(path, rank)`: one rank's file -> its tables (each with a `rank` column); runs in
  a worker process, so it reads nothing but the file and `self.tool_paths`, and may keep
  `self.cores` cores busy (its share of the workers, where they outnumber the files). Raise
  `NothingToAnalyse` for a readable file with nothing in it for the analyses (a note), any
  other exception for a damaged file (that file is skipped, a Problem).
- `analyse_tables(path, rank)`: the same tables as Arrow tables, as collect writes them (by
  default analyse_file's frames converted by hpcprof.run.results.to_arrow); a tool whose analyses
  build their columns directly implements this one, and analyse_file is then its tables read
  back as the run's results read them.
- `analyse_batch(files)`: analyse_tables of the several (path, rank) files of one map task, each
  file's tables or the exception it raised; by default one after another, a tool whose analyses
  are vectorised over ranks analyses them in one pass (nsys).
- `reducers()`: the steps that make tables across ranks, each `(read, log) -> tables` from the
  concatenated per-rank tables (`read(name)` gives one, or None), returning new or replacing
  tables and logging notes; independent of one another, so collect runs them in parallel workers
  (`reduce(read, log)` runs them all in this process).
- `check_ranks(run_dir, record, files)`: the run's rank files checked against its world and
  profile.ranks (hpcprof.run.rank_sets.check_rank_set over the files ending in the tool's suffixes in
  the profiler table; a rank's report and its export beside it are one file where
  `report_and_export`): the files collect analyses and one line naming what is wrong, which makes
  the run `partial`; `missing_cause(run_dir, record, rank)` says why a profiled rank left no file,
  from its log (nsys: a capture range that never opened); `check_without_files`: the check runs
  also where the run left no file of the tool at all.
- `rewritten`: the concatenated per-rank tables a reducer replaces (nsys: the timeline, cut to its
  median iteration): collect writes such a table whole only where no reducer wrote it (with several
  workers the other tables are joined while the reducers run: replacing one of those is an error).
- `run_steps()`: the tool's steps over the whole run once its tables are written, by name, each
  `(run_dir, record, log) -> tables` written as `<name>_<table>` (nsys: Echo's slowdown against the
  world-size-1 run of the sweep, `echo`). None by default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprof.core.errors import Problem
from hpcprof.run.rank_sets import check_rank_set
from hpcprof.run.ranks import RankSelection

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from hpcprof.run.record import RunRecord

Log = Callable[[str], None]
#: a concatenated per-rank table by name, None when no rank has it
ReadTable = Callable[[str], "pd.DataFrame | None"]
#: one cross-rank step: (read, log) -> the tables it makes
Reducer = Callable[[ReadTable, Log], "dict[str, pd.DataFrame]"]
#: one step over the whole run: (run directory, its record, log) -> the tables it makes
RunStep = Callable[[Path, "RunRecord", Log], "dict[str, pd.DataFrame]"]


@dataclass
class CollectContext:
    """A run's profiles as `collect` finds them: the run and its per-rank files (their paths as
    text, as collect.files.rank_files lists them)."""

    run_dir: Path
    tool: str                                   # nsys | ncu | torch
    files: list[str]                            # the profile files of this tool, all ranks
    rank_of: dict[str, int]                     # global rank of each file
    work_dir: Path                              # scratch/derived files (e.g. exported .sqlite)
    log: Log = print                            # progress lines and notes
    problem: Callable[[Problem], None] = print  # a file that cannot be used: the run is `partial`


class NothingToAnalyse(Exception):
    """A readable rank file that holds nothing the tool's analyses use (e.g. a CPU run's torch
    trace): a note, not a damaged file."""


def each_alone(analyse: Callable[[Path, int], dict[str, pa.Table]],
               files: Sequence[tuple[Path, int]]) -> list[dict[str, pa.Table] | Exception]:
    """`analyse(path, rank)` of each file on its own, or the exception it raised."""
    out: list[dict[str, pa.Table] | Exception] = []
    for path, rank in files:
        try:
            out.append(analyse(path, rank))
        except Exception as exc:        # this file's error, handed back
            out.append(exc)
    return out


class ToolCollector:
    """One profiling tool in `collect`; `tool_paths` are the site's executables by tool (collect gives
    the run's tool's program, {"nsys": path}), `cores` how many cores one file's analysis may use (1:
    its own process only).
    Subclasses implement `analyse_file` and, where they need to, `inputs` and `reducers`."""

    #: the concatenated per-rank tables that a reducer replaces (written whole only where none did)
    rewritten: tuple[str, ...] = ()
    #: a rank's report and its export beside it (same name, another suffix) are one rank file
    report_and_export = False
    #: the rank set is checked also where the run left no file of the tool at all
    check_without_files = False

    def __init__(self, tool_paths: Mapping[str, str] | None = None, cores: int = 1) -> None:
        self.tool_paths = dict(tool_paths or {})
        self.cores = cores

    def inputs(self, ctx: CollectContext) -> dict[str, int]:
        """The files to analyse (paths as text) with their ranks: every file as found."""
        return {f: ctx.rank_of.get(f, -1) for f in ctx.files}

    def analyse_file(self, path: Path, rank: int) -> dict[str, pd.DataFrame]:
        """One rank's file -> its tables (each with a `rank` column)."""
        raise NotImplementedError

    def analyse_tables(self, path: Path, rank: int) -> dict[str, pa.Table]:
        """One rank's file -> its tables as collect writes them (Arrow, no pandas metadata)."""
        from hpcprof.run.results import to_arrow

        return {name: to_arrow(df, pandas_metadata=False) for name, df in self.analyse_file(path, rank).items()}

    def analyse_batch(self, files: Sequence[tuple[Path, int]]) -> list[dict[str, pa.Table] | Exception]:
        """analyse_tables of each of several rank files (one map task's), or the exception it raised;
        each file on its own unless the tool's analyses can take several files in one pass."""
        return each_alone(self.analyse_tables, files)

    def reducers(self) -> Sequence[Reducer]:
        """The cross-rank steps (Reducer), independent of one another: none by default."""
        return ()

    def check_ranks(self, run_dir: Path, record: RunRecord, files: dict[str, int]) -> tuple[dict[str, int], str | None]:
        """`files` (path -> rank, as collect lists them) without those the run's rank set leaves out
        (check_rank_set of the files ending in the tool's suffixes, against the run's world size,
        ranks per node and profile.ranks), and the one line naming what is wrong (None: nothing)."""
        from hpcprof import profilers

        tool = record.tool
        ours = {p: r for p, r in files.items() if p.endswith(profilers.get(tool).suffixes or ("",))}
        ranks = check_rank_set(ours.items(), record.world_size, RankSelection(record.experiment.profile.ranks),
                               record.ranks_per_node, self.report_and_export,
                               identity=str)          # one directory's listing: every path once
        line = ranks.summary(lambda rank: self.missing_cause(run_dir, record, rank))
        return {p: r for p, r in files.items() if p not in ours or p in ranks.files}, \
            None if line is None else f"{tool}: {line}"

    def missing_cause(self, run_dir: Path, record: RunRecord, rank: int) -> str:
        """Why profiled rank `rank` of the run in `run_dir` left no file: no rank log (the rank never
        started), else see the log."""
        tool, log = record.tool, Path("logs") / f"rank{rank}.log"
        if not (run_dir / log).is_file():
            return f"no {tool} profile and no rank log ({log}): the rank never started"
        return f"no {tool} profile written (see {log})"

    def reduce(self, read: ReadTable, log: Log) -> dict[str, pd.DataFrame]:
        """Every cross-rank table, the reducers run one after another in this process."""
        return {name: table for step in self.reducers() for name, table in step(read, log).items()}

    def run_steps(self) -> Mapping[str, RunStep]:
        """The steps over the whole run after its tables (RunStep), by name: none by default."""
        return {}
