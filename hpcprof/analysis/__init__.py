"""Analyses of profiler output, one package per tool, each a function from data to DataFrames.

`collect` hands each run's profiles to the collector registered here for the profile tool.
A collector takes a `CollectContext` and returns named DataFrames; `collect` writes them to
`results/<tool>_<name>.csv` and into the campaign store. Collectors never write into the
user's profile files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd


@dataclass
class CollectContext:
    """What a collector gets: the run, its per-rank profile files and the site's tools."""

    run_dir: Path
    tool: str                                   # nsys | ncu | torch
    files: list[Path]                           # the profile files of this tool, all ranks
    rank_of: dict[Path, int]                    # global rank of each file
    work_dir: Path                              # scratch/derived files (e.g. exported .sqlite)
    tool_paths: dict[str, str] = field(default_factory=dict)  # {"nsys": path, "ncu": path}
    log: Callable[[str], None] = print          # progress and "skipped because ..." lines


Collector = Callable[[CollectContext], dict[str, pd.DataFrame]]


def collectors() -> dict[str, Collector]:
    """The collector of each profile tool (imported lazily: analyses are heavy)."""
    from hpcprof.analysis.ncu.collect import collect_ncu
    from hpcprof.analysis.nsys.collect import collect_nsys
    from hpcprof.analysis.trace.collect import collect_traces

    return {"nsys": collect_nsys, "ncu": collect_ncu, "torch": collect_traces}
