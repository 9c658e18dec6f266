"""A run's files as collect finds them: the workload's JSON results as tables (with seqpar's and
ddp's profiler slowdown from them and their reference run's), the manifest of its logs, profiles
and results, and the per-rank files of a profile directory."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprof.collect.common import Report, short
from hpcprof.core.errors import Problem
from hpcprof.core.safe_paths import RESULT_FILE, read_regular
from hpcprof.run.ranks import rank_from_filename
from hpcprof.run.results import ResultError, check_name
from hpcprof.run.rundir import RunDir

if TYPE_CHECKING:
    import pandas as pd

def workload_tables(results_dir: Path, problem: Report) -> dict[str, pd.DataFrame]:
    """Tables from the workload's JSON results: every list of records becomes one table
    (`<file>.<key>`), the scalar fields of each file one row (`<file>`). Unreadable files and
    names that are not one safe path component are reported through `problem` and skipped."""
    import pandas as pd

    tables: dict[str, pd.DataFrame] = {}
    for path in sorted(results_dir.glob("*.json")):
        try:
            data = json.loads(read_regular(path, RESULT_FILE))   # a FIFO or /dev/zero: named, not read
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problem(Problem(path, f"unreadable JSON, skipped ({short(exc)})"))
            continue
        if not isinstance(data, dict):
            continue
        candidates: dict[str, Callable[[], pd.DataFrame]] = {}
        scalars = {k: v for k, v in data.items() if isinstance(v, (str, int, float, bool)) or v is None}
        if scalars:
            candidates[path.stem] = partial(pd.DataFrame, [scalars])
        for key, value in data.items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                candidates[f"{path.stem}.{key}"] = partial(pd.json_normalize, value)
        for name, make in candidates.items():
            try:
                check_name(f"workload_{name}")
                tables[name] = make()
            except (ResultError, ValueError, TypeError) as exc:
                problem(Problem(path, f"table {name!r} skipped ({short(exc)})"))
    return tables


def loop_perturbation_tables(results_dir: Path, kind: str, tables: dict[str, pd.DataFrame],
                             problem: Report) -> dict[str, pd.DataFrame]:
    """steps_perturbation of a seqpar or ddp run's own timed loop (`tables`: its workload tables,
    workload_tables'), against the iterations the profiler did not touch in its processes, else
    against the job's unprofiled reference run's (its results in `results_dir`/reference/,
    profile.reference; hpcprof.analysis.steps.loop_perturbation); none where neither has enough."""
    from hpcprof.analysis.steps import loop_perturbation
    from hpcprof.core import catalog as c

    _, rows_table, phase = c.WORKLOAD_TIMINGS[kind]
    rows = tables.get(rows_table.key)
    if rows is None or rows.empty:
        return {}
    folder = results_dir / c.REFERENCE_DIR
    reference = workload_tables(folder, problem).get(rows_table.key) if folder.is_dir() else None
    found = loop_perturbation(rows, phase, reference)
    return {c.STEPS_PERTURBATION.key: found} if not found.empty else {}


def ceilings_tables(run_dir: Path, problem: Report) -> dict[str, pd.DataFrame]:
    """bench_ceilings from the run's ceilings.json (`hpcprof bench ceilings` in the job): one row per
    measurement, the catalog's columns in order; none without the file, a damaged one reported."""
    import pandas as pd

    from hpcprof.core import catalog as c

    path = run_dir / c.CEILINGS_FILE
    if not path.exists():
        return {}
    try:
        rows = json.loads(read_regular(path, RESULT_FILE))["rows"]
        table = pd.DataFrame([{name: row.get(name) for name in c.CEILINGS_COLUMNS} for row in rows],
                             columns=list(c.CEILINGS_COLUMNS))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        problem(Problem(path, f"unreadable ceilings result, skipped ({short(exc)})"))
        return {}
    return {c.BENCH_CEILINGS.key: table}


def manifest(run: RunDir) -> pd.DataFrame:
    """Every log, profile and workload result file of the run (regular files, and links to them;
    no hidden, temporary or Parquet file; linked directories not entered), with rank and size,
    in path order. One scandir per directory and one stat per file: it runs while the workers
    analyse, on a core they would use (benchmarks/results/comment_measurements.txt)."""
    import pandas as pd

    rows = []       # text and tuples, no Path or dict per file: at 16,384 ranks ~10 MB less at the collect's peak
    for sub in ("logs", "profiles", "results", "forensics", "steps"):
        found: list[tuple[str, int]] = []
        directories = [sub]
        while directories:
            relative = directories.pop()
            try:
                with os.scandir(run.path / relative) as listing:
                    for entry in listing:
                        path = f"{relative}/{entry.name}"
                        try:
                            if entry.is_dir():
                                if not entry.is_symlink():
                                    directories.append(path)
                            elif entry.is_file() and not entry.name.startswith(".") \
                                    and not entry.name.endswith((".tmp", ".parquet")):
                                found.append((path, entry.stat().st_size))
                        except OSError:      # gone meanwhile, or a link that does not resolve
                            continue
            except OSError:
                continue
        for path, size in sorted(found, key=lambda row: row[0].replace("/", "\0")):   # as Path objects sort
            rows.append((sub, path, rank_from_filename(path), size))
    return pd.DataFrame(rows, columns=["kind", "path", "rank", "bytes"]).astype({"rank": "Int64"})


def rank_files(profile_dir: Path, problem: Report) -> dict[str, int]:
    """The per-rank files of a profile directory (a rank in the name) with their ranks, in name
    order, their paths as text (making and hashing a Path costs most of a listing of many ranks:
    benchmarks/gpu/results/collect_cores.txt); every entry named like one that is not a readable
    regular file (a directory, a symlink loop, a dangling link) is a Problem. One read of the
    directory: a regular file's type is in the
    listing, only links (and entries of a file system that gives no type) are stat'ed."""
    with os.scandir(profile_dir) as listing:
        entries = sorted((entry.name, entry) for entry in listing if not entry.name.startswith("."))
    files: dict[str, int] = {}
    for name, entry in entries:
        rank = rank_from_filename(name)
        if rank is None:
            continue
        try:
            if entry.is_symlink():      # followed: a loop or a dangling link says why
                regular = stat.S_ISREG(os.stat(entry.path).st_mode)
            else:
                regular = entry.is_file(follow_symlinks=False)
        except OSError as exc:
            problem(Problem(Path(entry.path), f"skipped ({exc.strerror})"))
            continue
        if not regular:
            problem(Problem(Path(entry.path), "skipped (not a regular file)"))
            continue
        files[entry.path] = rank
    return files
