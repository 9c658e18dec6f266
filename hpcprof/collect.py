"""Collect finished runs: workload results, a manifest of logs and profiles, and each profile
tool's analysis, into `results/<table>.parquet` (hpcprof.results) and the run's typed summary in
the campaign store. Collecting twice changes nothing.

Isolation: every run and every file is collected on its own; one that cannot be read is a
`Problem` (hpcprof.errors: the file and why), reported in one line and recorded (`collect_status
= partial`, exit status 3), the rest is collected. Whatever the cause (a damaged export, an export
nsys could not make or no nsys to make it, a directory or a symlink loop named like a rank file,
a worker that died), it is a Problem value handed to `Collected.report`, never a log line matched
for words. Rank files (nsys
exports, ncu CSVs, torch traces) are analysed per file in parallel (a process pool, or
`mpi4py.futures` workers when launched under `mpiexec -n N python -m mpi4py.futures -m hpcprof
collect`): each worker writes its rank's tables to `derived/<tool>/parts/`; the run's tables are
concatenated from those parts, the cross-rank tables reduced and the summary computed in the
workers too, so this process's memory does not grow with the number of ranks. Files unchanged
since the last collect (size and mtime) are skipped while their cached parts read; a damaged
part is made again. Temporary files a killed collect left behind are removed.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
from concurrent.futures import BrokenExecutor, Executor, Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from hpcprof.atomic import atomic_write, remove_stale_temps
from hpcprof.errors import Problem, UserError, WorkerDied
from hpcprof.results import ResultError, check_name, write_table
from hpcprof.rundir import RunDir
from hpcprof.store import Store

RANK_IN_NAME = re.compile(r"rank(\d+)")
#: exit status of `hpcprof collect` when something was skipped (the rest is collected)
EXIT_PARTIAL = 3
Log = Callable[[str], None]
#: where a Problem goes (Collected.report of the run being collected)
Report = Callable[[Problem], None]


def rank_of(path: Path) -> int | None:
    """The rank in a per-rank file name (`rank3.nsys-rep` -> 3)."""
    match = RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def _short(exc: BaseException) -> str:
    if isinstance(exc, UserError):
        return exc.format_message()
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:160]}" if lines else type(exc).__name__


@dataclass
class Collected:
    """What collecting one run gave: table names written, and every Problem (each also logged)."""

    run_id: str
    log: Log = print
    tables: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def report(self, problem: Problem) -> None:
        """Record one Problem of the run: the run is then `partial` (collect exits 3)."""
        self.problems.append(problem)
        self.log(f"{self.run_id}: {problem}")


def workload_tables(results_dir: Path, problem: Report) -> dict[str, pd.DataFrame]:
    """Tables from the workload's JSON results: every list of records becomes one table
    (`<file>.<key>`), the scalar fields of each file one row (`<file>`). Unreadable files and
    names that are not one safe path component are reported through `problem` and skipped."""
    tables: dict[str, pd.DataFrame] = {}
    for path in sorted(results_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problem(Problem(path, f"unreadable JSON, skipped ({_short(exc)})"))
            continue
        if not isinstance(data, dict):
            continue
        candidates: dict[str, Callable[[], pd.DataFrame]] = {}
        scalars = {k: v for k, v in data.items() if isinstance(v, (str, int, float, bool)) or v is None}
        if scalars:
            candidates[path.stem] = lambda s=scalars: pd.DataFrame([s])
        for key, value in data.items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                candidates[f"{path.stem}.{key}"] = lambda v=value: pd.json_normalize(v)
        for name, make in candidates.items():
            try:
                check_name(f"workload_{name}")
                tables[name] = make()
            except (ResultError, ValueError, TypeError) as exc:
                problem(Problem(path, f"table {name!r} skipped ({_short(exc)})"))
    return tables


def manifest(run: RunDir) -> pd.DataFrame:
    """Every log, profile and workload result file of the run, with rank and size."""
    rows = []
    for sub in ("logs", "profiles", "results"):
        for path in sorted((run.path / sub).rglob("*")):
            if path.name.startswith(".") or path.name.endswith((".tmp", ".parquet")) or not path.is_file():
                continue
            rows.append({"kind": sub, "path": str(path.relative_to(run.path)),
                         "rank": rank_of(path), "bytes": path.stat().st_size})
    return pd.DataFrame(rows, columns=["kind", "path", "rank", "bytes"]).astype({"rank": "Int64"})


# ---------------------------------------------------------------------------------------------
# executors and progress


def under_mpi_futures() -> bool:
    """True when started by `mpiexec ... python -m mpi4py.futures` with more than one process."""
    if not any(k in os.environ for k in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")):
        return False
    if "mpi4py.futures" not in sys.modules:
        return False
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_size() > 1


class InProcess(Executor):
    """Runs each task at once in this process (1 worker: no pool, no pickling)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller through the future
            future.set_exception(exc)
        return future


def make_executor(workers: int) -> tuple[Executor, str]:
    """mpi4py.futures workers under mpiexec, else a process pool of `workers` (1: this process);
    with a description for the log."""
    if under_mpi_futures():
        from mpi4py import MPI
        from mpi4py.futures import MPIPoolExecutor

        return MPIPoolExecutor(), f"{MPI.COMM_WORLD.Get_size() - 1} mpi4py.futures worker(s)"
    if workers <= 1:
        return InProcess(), "1 process"
    return ProcessPoolExecutor(workers), f"{workers} worker processes"


class Progress:
    """Files and bytes done with an ETA: a rich bar on a terminal, else a few plain log lines."""

    def __init__(self, label: str, total_files: int, total_bytes: int, log: Log) -> None:
        self.label, self.total, self.bytes, self.log = label, total_files, total_bytes, log
        self.done = self.done_bytes = 0
        self.start = time.monotonic()
        self.bar = None
        if sys.stderr.isatty() and total_files > 1:
            from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress as Bar,
                                       TextColumn, TimeRemainingColumn)

            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           DownloadColumn(), TimeRemainingColumn(), transient=True)
            self.task = self.bar.add_task(label, total=total_bytes)
            self.bar.start()

    def advance(self, nbytes: int) -> None:
        self.done += 1
        self.done_bytes += nbytes
        if self.bar is not None:
            self.bar.update(self.task, advance=nbytes, description=f"{self.label} {self.done}/{self.total} files")
            return
        step = max(1, self.total // 10)
        if self.done % step == 0 or self.done == self.total:
            elapsed = time.monotonic() - self.start
            eta = elapsed / self.done_bytes * (self.bytes - self.done_bytes) if self.done_bytes else 0.0
            self.log(f"{self.label}: {self.done}/{self.total} files, {self.done_bytes / 1e6:.1f}/"
                     f"{self.bytes / 1e6:.1f} MB, {elapsed:.1f} s, ETA {eta:.0f} s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


# ---------------------------------------------------------------------------------------------
# per-file map and cross-rank reduce (nsys)


def _parts_dir(run_path: Path, tool: str) -> Path:
    return run_path / "derived" / tool / "parts"


def _part_key(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", path.name)


def map_file(tool: str, path: str, rank: int, parts: str, tool_paths: dict[str, str]) -> list[str]:
    """Analyse one rank's file (in a worker) and write its tables under `parts/<file>/`."""
    from hpcprof.analysis import file_analyser

    tables = file_analyser(tool, tool_paths)(Path(path), rank)
    out = Path(parts) / _part_key(Path(path))
    for name, df in tables.items():
        write_table(out, name, df)
    return sorted(tables)


def _load_manifest(parts: Path) -> dict[str, Any]:
    try:
        return json.loads((parts / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}


def _save_manifest(parts: Path, data: dict[str, Any]) -> None:
    atomic_write(parts / "manifest.json", json.dumps(data, indent=0, sort_keys=True), what="collect cache")


def _part_reads(parts: Path, key: str, tables: list[str]) -> bool:
    """Whether every cached table of one file's part is there and its Parquet footer reads
    (a damaged or truncated part is made again)."""
    import pyarrow.parquet as pq

    try:
        for name in tables:
            pq.read_metadata(parts / key / "results" / f"{name}.parquet")
    except Exception:  # pyarrow raises ArrowInvalid, OSError, ... on a damaged file
        return False
    return True


def map_files(tool: str, files: dict[Path, int], run_path: Path, executor: Executor, log: Log,
              problem: Report, tool_paths: dict[str, str] | None = None,
              in_flight: int = 1024) -> dict[str, list[str]]:
    """Run `map_file` over every file not collected yet (or changed, or whose cached part is
    damaged), at most `in_flight` files submitted at a time, streaming results as workers finish;
    returns {part key: tables} of every usable file, in rank order."""
    from hpcprof.analysis import NothingToAnalyse

    parts = _parts_dir(run_path, tool)
    old = _load_manifest(parts)
    new: dict[str, Any] = {}
    table_lists: dict[tuple[str, ...], list[str]] = {}  # one list per distinct set of tables, not one per file
    pending: list[tuple[Path, int, os.stat_result]] = []
    for path, rank in files.items():
        try:
            st = path.stat()
        except OSError as exc:
            problem(Problem(path, f"skipped ({exc.strerror})"))
            continue
        key = _part_key(path)
        prev = old.get(key)
        if isinstance(prev, dict) and prev.get("size") == st.st_size and prev.get("mtime_ns") == st.st_mtime_ns \
                and prev.get("rank") == rank and isinstance(prev.get("tables"), list) \
                and _part_reads(parts, key, prev["tables"]):
            prev["tables"] = table_lists.setdefault(tuple(prev["tables"]), prev["tables"])
            new[key] = prev
        else:
            pending.append((path, rank, st))
    del old
    if len(new):
        log(f"{tool}: {len(new)} file(s) unchanged since the last collect, skipped")
    progress = Progress(f"{tool} {run_path.name}", len(pending), sum(st.st_size for _, _, st in pending), log)
    queue = iter(pending)
    running: dict[Future, tuple[Path, int, os.stat_result]] = {}

    def submit_next() -> None:
        for path, rank, st in queue:
            running[executor.submit(map_file, tool, str(path), rank, str(parts), tool_paths or {})] = (path, rank, st)
            return

    try:
        for _ in range(in_flight):
            submit_next()
        while running:
            future = next(as_completed(running))
            path, rank, st = running.pop(future)
            submit_next()
            try:
                tables = future.result()
            except BrokenExecutor:  # a worker died (killed, out of memory): the files it left undone
                problem(WorkerDied(path))
            except NothingToAnalyse as exc:  # readable, nothing for the analyses: a note
                log(f"{tool}: note: {exc}")
                new[_part_key(path)] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "rank": rank, "tables": []}
            except Exception as exc:  # a damaged file: this file only
                problem(Problem(path, f"skipped ({_short(exc)})"))
            else:
                new[_part_key(path)] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "rank": rank,
                                        "tables": table_lists.setdefault(tuple(tables), tables)}
            progress.advance(st.st_size)
            if progress.done % 256 == 0:  # an interrupted collect keeps what is done
                _save_manifest(parts, new)
    finally:
        progress.close()
    _save_manifest(parts, new)
    order = sorted(new, key=lambda k: (new[k]["rank"], k))
    return {k: new[k]["tables"] for k in order}


def concat_parts(parts: Path, keys: list[str], name: str, target: Path,
                 row_group: int = 262_144, compact_every: int = 64) -> bool:
    """Stream the `name` tables of the parts `keys` into one Parquet file, in that order: one part
    (and one row group of at most `row_group` rows) in memory at a time. The parts waiting for
    their row group are merged into one contiguous table every `compact_every` parts (thousands of
    small Arrow tables cost far more memory than their rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = [parts / k / "results" / f"{name}.parquet" for k in keys]
    if not paths:
        return False
    schema = pq.read_schema(paths[0]).remove_metadata()
    for p in paths[1:]:  # one running schema, not one per part
        other = pq.read_schema(p).remove_metadata()
        if not other.equals(schema):
            schema = pa.unify_schemas([schema, other], promote_options="permissive")

    def write(tmp: Path) -> None:
        with pq.ParquetWriter(tmp, schema) as writer:
            pending: list[pa.Table] = []
            rows = 0
            for p in paths:
                table = pq.ParquetFile(p).read(use_threads=False).replace_schema_metadata(None)
                for column in schema.names:
                    if column not in table.column_names:
                        table = table.append_column(column, pa.nulls(len(table), schema.field(column).type))
                pending.append(table.select(schema.names).cast(schema))
                rows += len(table)
                if len(pending) >= compact_every:
                    pending = [pa.concat_tables(pending).combine_chunks()]
                if rows >= row_group:
                    writer.write_table(pa.concat_tables(pending))
                    pending, rows = [], 0
            if pending:
                writer.write_table(pa.concat_tables(pending))

    atomic_write(target, write, what="result table")
    return True


def cross_rank_tables(tool: str, run_path: Path) -> tuple[list[str], list[str]]:
    """The tool's cross-rank reduce over the run's concatenated tables, written to results/;
    returns (table names written, notes to log)."""
    from hpcprof.analysis import cross_rank_reducer
    from hpcprof.results import read_table

    reducer = cross_rank_reducer(tool)
    notes: list[str] = []
    if reducer is None:
        return [], notes
    written = []
    for name, df in reducer(lambda n: read_table(run_path, f"{tool}_{n}"), notes.append).items():
        write_table(run_path, f"{tool}_{name}", df)
        written.append(f"{tool}_{name}")
    return written, notes


def reduce_parts(tool: str, run_path: Path, mapped: dict[str, list[str]], executor: Executor | None = None,
                 log: Log = print) -> list[str]:
    """Tables of the whole run from the per-file parts: each table concatenated, then the tool's
    cross-rank reduce (e.g. nsys's NCCL summary across ranks), both in `executor`'s workers so
    that this process never holds the rows of all ranks. Returns the table names written."""
    from hpcprof.results import table_path

    executor = executor or InProcess()
    parts = _parts_dir(run_path, tool)
    names = sorted({n for tables in mapped.values() for n in tables})
    futures = {name: executor.submit(concat_parts, parts, [k for k, t in mapped.items() if name in t], name,
                                     table_path(run_path, f"{tool}_{name}")) for name in names}
    try:
        written = [f"{tool}_{name}" for name, future in futures.items() if future.result()]
    except Exception as exc:  # a cached part whose footer reads but whose data does not
        (parts / "manifest.json").unlink(missing_ok=True)  # every part is made again
        raise DamagedCache(f"{parts}: a cached part does not read ({_short(exc)})") from None
    reduced, notes = executor.submit(cross_rank_tables, tool, run_path).result()
    for line in notes:
        log(line)
    return written + [name for name in reduced if name not in written]


class DamagedCache(Exception):
    """collect's own cache of per-file parts is damaged: it is made again."""


# ---------------------------------------------------------------------------------------------
# one run


def rank_files(profile_dir: Path, problem: Report) -> list[Path]:
    """The per-rank files of a profile directory (a rank in the name); every entry named like
    one that is not a readable regular file (a directory, a symlink loop, a dangling link) is
    a Problem."""
    files = []
    for path in sorted(profile_dir.iterdir()):
        if rank_of(path) is None or path.name.startswith("."):
            continue
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            problem(Problem(path, f"skipped ({exc.strerror})"))
            continue
        if not stat.S_ISREG(mode):
            problem(Problem(path, "skipped (not a regular file)"))
            continue
        files.append(path)
    return files


def collect_run(run: RunDir, store: Store, log: Log = print, executor: Executor | None = None) -> Collected:
    """Collect one run; every step is isolated, problems are returned and recorded."""
    from hpcprof.analysis import CollectContext, file_analysers

    done = Collected(run.run_id, log)
    executor = executor or InProcess()
    for directory in (run.path / "results", run.path / "derived"):
        remove_stale_temps(directory)  # what a killed collect was writing

    def step(label: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # one step failing never stops the others
            done.report(Problem(None, f"{label}: {_short(exc)}"))

    def save(source: str, tables: dict[str, pd.DataFrame]) -> None:
        for name, df in tables.items():
            try:
                write_table(run.path, f"{source}_{name}", df)
                done.tables.append(f"{source}_{name}")
            except (ResultError, ValueError, TypeError, OSError) as exc:
                done.report(Problem(None, f"{source}_{name}: not written ({_short(exc)})"))

    config = run.config  # an unreadable config.json fails the run (the caller reports it)
    step("workload", lambda: save("workload", workload_tables(run.path / "results", done.report)))
    step("files", lambda: save("files", {"manifest": manifest(run)}))
    tool = config["experiment"]["profile"]["tool"]
    profile_dir = run.path / "profiles" / tool

    def profiles() -> None:
        files = rank_files(profile_dir, done.report)
        if not files:
            log(f"{run.run_id}: no {tool} profiles in {profile_dir}")
            return
        site_paths = config["site"]["paths"]
        ctx = CollectContext(run_dir=run.path, tool=tool, files=files,
                             rank_of={p: rank_of(p) for p in files},  # type: ignore[misc]
                             work_dir=run.path / "derived" / tool,
                             tool_paths={"nsys": site_paths["nsys"], "ncu": site_paths["ncu"]},
                             log=log, problem=done.report)
        ctx.work_dir.mkdir(parents=True, exist_ok=True)
        inputs = file_analysers()[tool](ctx)
        mapped = map_files(tool, inputs, run.path, executor, log, done.report, ctx.tool_paths)
        if any(mapped.values()):
            try:
                done.tables.extend(reduce_parts(tool, run.path, mapped, executor, log))
            except DamagedCache as exc:
                log(f"{run.run_id}: {exc}; made again")
                mapped = map_files(tool, inputs, run.path, executor, log, done.report, ctx.tool_paths)
                done.tables.extend(reduce_parts(tool, run.path, mapped, executor, log))
        elif mapped:
            log(f"{run.run_id}: {tool}: nothing to analyse in its profiles")
        else:
            done.report(Problem(profile_dir, f"no usable {tool} profile"))

    if tool != "none" and profile_dir.is_dir():
        step(tool, profiles)

    def missing() -> None:  # a rank the profile was asked of that recorded nothing makes the run partial
        from hpcprof.analysis.nsys.collect import missing_profiles

        for line in missing_profiles(run.path, config):
            done.report(Problem(None, line))

    step("profiles", missing)

    def echo() -> None:
        from hpcprof.analysis.nsys.echo import echo_slowdown

        save("echo", echo_slowdown(run, log))  # Echo's flow: a ws-N DDP run against its sweep's ws-1 run

    step("echo", echo)

    def summary() -> None:
        from hpcprof.analysis.summary import run_summary

        # in a worker: the summary reads whole-run tables, which this process never holds
        store.replace_metrics(run.run_id, executor.submit(run_summary, run.path, config).result())

    if store.has_run(run.run_id):  # a run directory copied in from elsewhere has no record to update
        step("summary", summary)
        store.mark_collected(run.run_id, [str(p) for p in done.problems])
    return done


def collect_runs(selected: list[RunDir], store: Store, refresh: Callable[[RunDir], Any], log: Log,
                 workers: int = 1) -> int:
    """Collect every terminal run of `selected`, each isolated; returns the exit status
    (0, or EXIT_PARTIAL when a run had a Problem or could not be collected)."""
    skipped = False
    executor, how = make_executor(workers)
    log(f"collect: rank files analysed by {how}")
    try:
        for run in selected:
            try:
                state = refresh(run)
                if not state.terminal:
                    log(f"{run.run_id}: {state.state}, not collected yet")
                    continue
                result = collect_run(run, store, log=log, executor=executor)
            except Exception as exc:  # this run only: the others are still collected
                skipped = True
                log(f"{run.run_id}: not collected ({_short(exc)})")
                try:
                    if store.has_run(run.run_id):
                        store.mark_collected(run.run_id, [f"not collected: {_short(exc)}"])
                except Exception:  # the store itself is unusable: the line above says enough
                    pass
                continue
            skipped |= bool(result.problems)
            if any(isinstance(p, WorkerDied) for p in result.problems):
                executor.shutdown(wait=False)   # the pool is broken: a new one for the next runs
                executor, how = make_executor(workers)
            status = f"partially, {len(result.problems)} problem(s)" if result.problems else state.state
            log(f"collected {run.run_id} ({status}) -> {run.path / 'results'} ({len(result.tables)} tables)")
    finally:
        executor.shutdown()
    return EXIT_PARTIAL if skipped else 0
