"""Analyses of profiler output, one package per tool, each a function from data to DataFrames.

`collect` hands each run's profiles to its tool: every tool analyses each rank's file on its own
(a map run in parallel workers: `file_analyser`, the files chosen from a `CollectContext` by
`file_analysers`), then reduces across ranks over the per-rank tables (`cross_rank_reducer`).
`collect` writes the tables to `results/<tool>_<name>.parquet`. Analyses never write into the
user's profile files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from hpcprof.errors import Problem

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class CollectContext:
    """A run's profiles as `collect` finds them: the run, its per-rank files and the site's tools."""

    run_dir: Path
    tool: str                                   # nsys | ncu | torch
    files: list[Path]                           # the profile files of this tool, all ranks
    rank_of: dict[Path, int]                    # global rank of each file
    work_dir: Path                              # scratch/derived files (e.g. exported .sqlite)
    tool_paths: dict[str, str] = field(default_factory=dict)  # {"nsys": path, "ncu": path}
    log: Callable[[str], None] = print          # progress lines and notes
    problem: Callable[[Problem], None] = print  # a file that cannot be used: the run is `partial`


#: the files to map of a run, with their ranks
Inputs = Callable[[CollectContext], "dict[Path, int]"]
#: one rank's file -> its tables (each with a rank column)
FileAnalyser = Callable[[Path, int], "dict[str, pd.DataFrame]"]
#: reads a concatenated per-rank table by name, logs notes -> extra or re-ordered cross-rank tables
Reducer = Callable[[Callable[[str], "pd.DataFrame | None"], Callable[[str], None]], "dict[str, pd.DataFrame]"]


class NothingToAnalyse(Exception):
    """A readable rank file that holds nothing the tool's analyses use (e.g. a CPU run's torch
    trace): a note, not a damaged file."""


def file_analysers() -> dict[str, Inputs]:
    """Tools analysed file by file in parallel: tool -> the run's inputs to map."""
    from hpcprof.analysis.nsys.collect import sqlite_files

    def as_given(ctx: CollectContext) -> dict[Path, int]:
        return {f: ctx.rank_of.get(f, -1) for f in ctx.files}

    return {"nsys": sqlite_files, "ncu": as_given, "torch": as_given}


def file_analyser(tool: str, tool_paths: dict[str, str] | None = None) -> FileAnalyser:
    """One rank file's analysis for `tool` (ncu with the site's ncu from `tool_paths`)."""
    from functools import partial

    from hpcprof.analysis.ncu.collect import analyse_file as ncu_file
    from hpcprof.analysis.nsys.collect import analyse_file as nsys_file
    from hpcprof.analysis.trace.collect import analyse_file as trace_file

    ncu = partial(ncu_file, ncu=(tool_paths or {}).get("ncu"))
    return {"nsys": nsys_file, "ncu": ncu, "torch": trace_file}[tool]


def cross_rank_reducer(tool: str) -> Reducer | None:
    """The reduce over the concatenated per-rank tables of `tool`, if it has one."""
    from hpcprof.analysis.ncu.collect import reduce_files as ncu_reduce
    from hpcprof.analysis.nsys.collect import reduce_ranks
    from hpcprof.analysis.trace.collect import reduce_ranks as trace_reduce

    return {"nsys": lambda read, log: reduce_ranks(read), "ncu": ncu_reduce, "torch": trace_reduce}.get(tool)
