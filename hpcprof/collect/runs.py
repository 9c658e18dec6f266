"""Collect finished runs, one run at a time (the engine it runs on is hpcprof.pool):
workload results, a manifest of logs and profiles, and each profile tool's analysis, into
`results/<table>.parquet` (hpcprof.results) and the run's typed summary in the campaign store.
Collecting twice changes nothing.

Isolation: every run and every file is collected on its own; one that cannot be read is a
`Problem` (hpcprof.errors: the file and why), reported in one line and recorded (`collect_status
= partial`, exit status 3), the rest is collected. Whatever the cause (a damaged export, an export
nsys could not make or no nsys to make it, a directory or a symlink loop named like a rank file,
a worker that died), it is a Problem value handed to `Collected.report`, never a log line matched
for words. Rank files (nsys exports, ncu CSVs, torch traces) are analysed per file in parallel by
their tool's ToolCollector (hpcprof.analysis.registry), in a process pool or `mpi4py.futures`
workers when launched under `mpiexec -n N python -m mpi4py.futures -m hpcprof collect`: a worker
analyses several rank files a task and writes their tables into one bundle in `derived/<tool>/parts/`;
the run's tables are concatenated from those parts, the cross-rank tables reduced and the summary
computed in the workers too, so this process's memory does not grow with the number of ranks. Files unchanged since the last
collect (size and mtime) are skipped while their cached parts read; a damaged part is made
again. Temporary files a killed collect left behind are removed.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import BrokenExecutor, Executor, Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from hpcprof.atomic import atomic_write, remove_stale_temps, temp_path
from hpcprof.errors import Problem, UserError, WorkerDied
from hpcprof.pool import (
    BundleRows,
    DamagedBundle,
    InProcess,
    Log,
    Progress,
    concat_parts,
    concat_pieces,
    cores_per_file,
    executor_workers,
    make_executor,
    read_bundle,
    read_pieces,
    stream_map,
    write_bundle,
)
from hpcprof.ranks import rank_from_filename
from hpcprof.results import ResultError, check_name, forget_headline, write_headline, write_table
from hpcprof.rundir import RunDir, sweep_of
from hpcprof.store import Store

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

#: exit status of `hpcprof collect` when something was skipped (the rest is collected)
EXIT_PARTIAL = 3
#: the most files in one map task, and about how many tasks each worker gets (task_size); a task's
#: exports are analysed in one joint pass: per file 2.82 ms of CPU in a pass of 8 per-rank exports,
#: 2.42 of 16, 2.28 of 32, 2.26 of 64 (benchmarks/collect_file.py's export)
TASK_FILES, TASKS_PER_WORKER = 32, 8
#: seconds between saves of the map's manifest (what is done), which an interrupted collect keeps
MANIFEST_EVERY_S = 5.0
#: contiguous slices of the rank files per worker, each concatenated as soon as its files are mapped (SliceConcat)
SLICES_PER_WORKER = 4
T = TypeVar("T")    # an item of split_tasks
#: a rank file the map analyses: its path, rank, (size, mtime_ns) and part key (no os.stat_result: ~0.5 kB each)
PendingFile = tuple[str, int, tuple[int, int], str]
#: where a Problem goes (Collected.report of the run being collected)
Report = Callable[[Problem], None]
#: a context manager that adds its block's wall time to a phase of the run (Collected.timed)
Timed = Callable[[str], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def untimed(phase: str) -> Iterator[None]:
    """A Timed that records nothing."""
    yield


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection in the block (on again after it, where it was on): the listing
    of 16,384 rank files allocates ~100,000 objects, none in a cycle, enough to set off a full
    collection of every object of collect's imports (30-40 ms of its serial part), which then runs
    later, while the workers map. Never around a fork: a forked worker would start with it off."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


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


def workload_tables(results_dir: Path, problem: Report) -> dict[str, pd.DataFrame]:
    """Tables from the workload's JSON results: every list of records becomes one table
    (`<file>.<key>`), the scalar fields of each file one row (`<file>`). Unreadable files and
    names that are not one safe path component are reported through `problem` and skipped."""
    import pandas as pd

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
            candidates[path.stem] = partial(pd.DataFrame, [scalars])
        for key, value in data.items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                candidates[f"{path.stem}.{key}"] = partial(pd.json_normalize, value)
        for name, make in candidates.items():
            try:
                check_name(f"workload_{name}")
                tables[name] = make()
            except (ResultError, ValueError, TypeError) as exc:
                problem(Problem(path, f"table {name!r} skipped ({_short(exc)})"))
    return tables


def manifest(run: RunDir) -> pd.DataFrame:
    """Every log, profile and workload result file of the run (regular files, and links to them;
    no hidden, temporary or Parquet file; linked directories not entered), with rank and size,
    in path order. One scandir per directory and one stat per file: it runs while the workers
    analyse, on a core they would use (16,384 ranks: 0.06 s here, 0.15 s with two stats and a
    relpath per file)."""
    import pandas as pd

    rows = []       # text and tuples, no Path or dict per file: at 16,384 ranks ~10 MB less at the collect's peak
    for sub in ("logs", "profiles", "results", "forensics"):
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


# ---------------------------------------------------------------------------------------------
# per-file map and cross-rank reduce, through the tool's ToolCollector


def _parts_dir(run_path: Path, tool: str) -> Path:
    return run_path / "derived" / tool / "parts"


def _part_key(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(path))


class FilePart(NamedTuple):
    """Where one rank file's tables are: the bundle of its map task (a file name in the parts
    directory; "" when the file has no tables) and the file's place among the bundle's files."""

    bundle: str
    position: int
    tables: list[str]


class MapFailure(NamedTuple):
    """Why one file of a map task gave no tables: `note` when it had nothing to analyse (a note,
    not a problem), else the short reason it was skipped. Plain text: any exception a file raises
    comes back to this process, where an exception that does not unpickle would break the pool."""

    note: bool
    message: str


def map_task(tool: str, files: list[tuple[str, int]], parts: str, bundle: str,
             tool_paths: dict[str, str], cores: int = 1) -> list[FilePart | MapFailure]:
    """The tables of several rank files in one worker task (the tool's analyse_batch: each file's
    tables, or its error, on its own; on `cores` cores, see engine.cores_per_file), written together
    into one bundle, `parts/<bundle>`; per file where its tables are, or why it has none.
    (A task per file cost the collecting process ~0.4 ms a file in the pool's submit, pickling and
    result handling, and an mpi4py.futures worker a round trip per file; a bundle per file cost
    its write and the reduce's read of it ~1 ms a file.)"""
    from hpcprof.analysis.collector import NothingToAnalyse
    from hpcprof.analysis.registry import collector

    out: list[FilePart | MapFailure] = []
    written: list[dict[str, pa.Table]] = []
    for tables in collector(tool, tool_paths, cores).analyse_batch([(Path(path), rank) for path, rank in files]):
        if isinstance(tables, dict):
            try:
                for name in tables:
                    check_name(f"{tool}_{name}")
            except ResultError as exc:
                tables = exc
        if isinstance(tables, NothingToAnalyse):   # readable, nothing for the analyses
            out.append(MapFailure(True, str(tables)))
        elif isinstance(tables, Exception):        # a damaged file: this file only
            out.append(MapFailure(False, _short(tables)))
        else:
            out.append(FilePart(bundle, len(written), sorted(tables)) if tables else FilePart("", -1, []))
            if tables:
                written.append(tables)
    if written:
        try:
            write_bundle(Path(parts) / bundle, written)
        except Exception as exc:          # e.g. a full disk: each of its files is skipped with the reason
            failed = MapFailure(False, _short(exc))
            out = [failed if isinstance(o, FilePart) and o.tables else o for o in out]
    return out


def task_size(files: int, workers: int) -> int:
    """Files per map task: up to TASK_FILES, while every worker still gets about TASKS_PER_WORKER
    tasks (the workers then finish together)."""
    return max(1, min(TASK_FILES, files // (workers * TASKS_PER_WORKER)))


def split_tasks(items: list[T], workers: int) -> list[list[T]]:
    """`items` cut into map tasks, in order: of task_size files, but with several workers their
    last round (the last `workers` tasks' worth of files) in tasks of a quarter of that, so that
    the workers end within a quarter of a task of one another."""
    size = task_size(len(items), workers)
    small = max(1, size // 4)
    last_round = len(items) if workers == 1 else max(0, (len(items) - workers * size) // size * size)
    return ([items[i:i + size] for i in range(0, last_round, size)]
            + [items[i:i + small] for i in range(last_round, len(items), small)])


def _bundle_name(task: list[PendingFile]) -> str:
    """The bundle of a map task, named by its first file and a digest of what its files are
    (key, rank, size, mtime): a collect that maps the same files the same way writes the same
    file, another never overwrites one a cached file still names."""
    import hashlib

    what = repr([(key, rank, size, mtime_ns) for _, rank, (size, mtime_ns), key in task]).encode()
    return f"{task[0][3]}.{hashlib.blake2b(what, digest_size=8).hexdigest()}.arrow"


class ManifestEntry(NamedTuple):
    """A mapped file in the parts' manifest: its size, mtime and rank when it was mapped, and
    where its tables are (FilePart)."""

    size: int
    mtime_ns: int
    rank: int
    bundle: str
    position: int
    tables: list[str]


#: the parts' manifest (an Arrow IPC file, as Feather V2; not .arrow, the bundles' suffix: one row per mapped file,
#: the distinct table lists in its metadata), and the JSON one of earlier versions, no longer read
MANIFEST, OLD_MANIFEST = "manifest.feather", "manifest.json"


def _load_manifest(parts: Path) -> dict[str, ManifestEntry]:
    """The manifest's entries by part key; none where it is missing or does not read (every file
    is then mapped again)."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(parts / MANIFEST)) as source:
            table = pa.ipc.open_file(source).read_all()
        lists = json.loads((table.schema.metadata or {})[b"tables"])
        if not all(isinstance(names, list) and all(isinstance(n, str) for n in names) for names in lists):
            return {}
        columns = [table.column(name).to_pylist() for name in ("key", *ManifestEntry._fields)]
        if not all(0 <= i < len(lists) for i in columns[-1]):
            return {}
        return {key: ManifestEntry(size, mtime, rank, bundle, position, lists[tables])
                for key, size, mtime, rank, bundle, position, tables in zip(*columns, strict=True)}
    except (OSError, pa.ArrowException, ValueError, KeyError, IndexError, TypeError):
        return {}


def _save_manifest(parts: Path, entries: dict[str, ManifestEntry]) -> None:
    """Write the manifest as Arrow columns (a JSON document of every entry held ~1 kB of tokens per
    file at once: 20 MB at 16,384 ranks)."""
    import pyarrow as pa

    lists: dict[tuple[str, ...], int] = {}
    values = list(entries.values())
    table = pa.table({"key": list(entries), **{name: [getattr(e, name) for e in values]
                                                for name in ManifestEntry._fields[:-1]},
                      "tables": pa.array([lists.setdefault(tuple(e.tables), len(lists)) for e in values], pa.int32())},
                     metadata={"tables": json.dumps([list(names) for names in lists])})

    def write(tmp: Path) -> None:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)

    atomic_write(parts / MANIFEST, write, what="collect cache")
    (parts / OLD_MANIFEST).unlink(missing_ok=True)


def _cached(prev: ManifestEntry, stamp: tuple[int, int], rank: int, bundle_reads: Callable[[str], bool]) -> bool:
    """Whether a file's manifest entry `prev` still holds: the same size, mtime and rank, and its
    tables in a bundle that reads (every table matches its CRC; a damaged or truncated bundle
    is made again)."""
    return ((prev.size, prev.mtime_ns) == stamp and prev.rank == rank
            and (not prev.tables or bundle_reads(prev.bundle)))


def _pending_files(files: dict[str, int], parts: Path, problem: Report,
                   on_file: Callable[[str, FilePart | None], None]
                   ) -> tuple[list[PendingFile], dict[str, ManifestEntry], dict[tuple[str, ...], list[str]]]:
    """map_files' listing: the files of `files` to map, in rank order; the manifest entries of those
    whose cached parts still hold (`on_file` called for each, and for each file that does not stat:
    a Problem); and the distinct table lists of those entries."""
    for stale in parts.glob("*/results"):   # the layout before bundles: a directory of Parquet files per file
        shutil.rmtree(stale.parent, ignore_errors=True)
    old = _load_manifest(parts)
    new: dict[str, ManifestEntry] = {}
    table_lists: dict[tuple[str, ...], list[str]] = {}  # one list per distinct set of tables, not one per file
    readable: dict[str, bool] = {}

    def bundle_reads(bundle: str) -> bool:
        if bundle not in readable:
            try:
                read_bundle(parts / bundle)
                readable[bundle] = True
            except DamagedBundle:
                readable[bundle] = False
        return readable[bundle]

    pending: list[PendingFile] = []
    for path, rank in files.items():
        key = _part_key(path)
        try:
            st = os.stat(path)
        except OSError as exc:
            problem(Problem(Path(path), f"skipped ({exc.strerror})"))
            on_file(key, None)
            continue
        prev = old.get(key)
        stamp = (st.st_size, st.st_mtime_ns)
        if prev is not None and _cached(prev, stamp, rank, bundle_reads):
            new[key] = prev._replace(tables=table_lists.setdefault(tuple(prev.tables), prev.tables))
            on_file(key, FilePart(prev.bundle, prev.position, new[key].tables))
        else:
            pending.append((path, rank, stamp, key))
    del old
    pending.sort(key=lambda file: (file[1], file[3]))   # rank order (names sort rank10 before rank2), as the slices
    return pending, new, table_lists


def map_files(tool: str, files: dict[str, int], run_path: Path, executor: Executor, log: Log,
              problem: Report, tool_paths: dict[str, str] | None = None, in_flight: int = 1024,
              meanwhile: Callable[[], None] | None = None,
              on_file: Callable[[str, FilePart | None], None] = lambda key, part: None) -> dict[str, FilePart]:
    """Run `analyse_file` over every file of `files` (path -> rank) not collected yet (or changed,
    or whose cached bundle is damaged), in rank order, several files a task (map_task, one bundle
    per task: the consecutive ranks SliceConcat concatenates together are in one), about `in_flight` files
    submitted at a time but at least TASKS_PER_WORKER tasks a worker, streaming results as
    workers finish (`meanwhile()` runs in this process once the first files are submitted,
    stream_map: the work queued must outlast it, or the workers run dry; 2 tasks a worker, 0.4 s
    of work, against 0.7-0.9 s of own steps at 16,384 ranks on 16 cores); returns {part key:
    FilePart} of every usable file, in rank order. `on_file(key, part)` is called as each file has its outcome (part None:
    skipped), e.g. SliceConcat.file_done. Bundles no file names any more are removed (those a
    concurrent collect wrote since this one started are left)."""
    started = time.time()
    parts = _parts_dir(run_path, tool)
    with gc_paused():
        pending, new, table_lists = _pending_files(files, parts, problem, on_file)
    if len(new):
        log(f"{tool}: {len(new)} file(s) unchanged since the last collect, skipped")
    progress = Progress(f"{tool} {run_path.name}", len(pending), sum(size for _, _, (size, _), _ in pending), log)
    tasks = split_tasks(pending, executor_workers(executor))
    cores = cores_per_file(executor, len(pending))
    jobs = ((i, (tool, [(path, rank) for path, rank, _, _ in task], str(parts), _bundle_name(task),
                 tool_paths or {}, cores))
            for i, task in enumerate(tasks))
    saved = time.monotonic()
    try:
        queued = max(in_flight // len(tasks[0]), TASKS_PER_WORKER * executor_workers(executor)) if tasks else 1
        for i, future in stream_map(executor, map_task, jobs, queued, meanwhile):
            task = tasks[i]
            outcomes: list[FilePart | MapFailure | None]
            try:
                outcomes = future.result()
            except BrokenExecutor:  # a worker died (killed, out of memory): the files it left undone
                outcomes = [None] * len(task)
            for (path, rank, (size, mtime_ns), key), outcome in zip(task, outcomes, strict=True):
                if outcome is None:
                    problem(WorkerDied(Path(path)))
                    on_file(key, None)
                    continue
                if isinstance(outcome, MapFailure):
                    if not outcome.note:
                        problem(Problem(Path(path), f"skipped ({outcome.message})"))
                        on_file(key, None)
                        continue
                    log(f"{tool}: note: {outcome.message}")
                    outcome = FilePart("", -1, [])
                new[key] = ManifestEntry(size, mtime_ns, rank, outcome.bundle, outcome.position,
                                         table_lists.setdefault(tuple(outcome.tables), outcome.tables))
                on_file(key, outcome)
            progress.advance(sum(size for _, _, (size, _), _ in task), len(task))
            if time.monotonic() - saved > MANIFEST_EVERY_S:  # an interrupted collect keeps what is done
                _save_manifest(parts, new)
                saved = time.monotonic()
    finally:
        progress.close()
    _save_manifest(parts, new)
    named = {entry.bundle for entry in new.values()}
    for bundle in parts.glob("*.arrow"):
        with contextlib.suppress(OSError):
            if bundle.name not in named and bundle.stat().st_mtime < started:
                bundle.unlink()
    order = sorted(new, key=lambda k: (new[k].rank, k))
    return {k: FilePart(new[k].bundle, new[k].position, new[k].tables) for k in order}


def cross_rank_tables(tool: str, run_path: Path, step: int,
                      pieces: dict[str, list[Path]] | None = None) -> tuple[list[str], list[str]]:
    """Cross-rank step `step` of the tool (its reducers()) over the run's concatenated tables (read
    from their slices' `pieces` where given, else from results/), written to results/; returns
    (table names written, notes to log)."""
    from hpcprof.analysis.registry import collector
    from hpcprof.results import read_table

    def read(name: str) -> pd.DataFrame | None:
        if pieces is None:
            return read_table(run_path, f"{tool}_{name}")
        return read_pieces(pieces[name]).to_pandas() if name in pieces else None

    notes: list[str] = []
    written = []
    reducer = collector(tool).reducers()[step]
    for name, df in reducer(read, notes.append).items():
        write_table(run_path, f"{tool}_{name}", df)
        written.append(f"{tool}_{name}")
    return written, notes


def bundle_runs(mapped: Iterable[FilePart]) -> list[tuple[str, int, int, list[str]]]:
    """The files of `mapped` (in order) as runs of consecutive files of one bundle: (bundle, first
    file, end file, the tables any of them has, in order); files without tables are left out."""
    runs: list[tuple[str, int, int, list[str]]] = []
    for part in mapped:
        if not part.tables:
            continue
        if runs and runs[-1][0] == part.bundle and runs[-1][2] == part.position:
            bundle, first, _, tables = runs[-1]
            more = [name for name in part.tables if name not in tables]
            runs[-1] = (bundle, first, part.position + 1, tables + more if more else tables)
        else:
            runs.append((part.bundle, part.position, part.position + 1, part.tables))
    return runs


def _concat_slice(parts: Path, held: list[tuple[str, int, int, list[str]]], targets: dict[str, Path]) -> list[str]:
    """concat_parts of the bundle runs `held` into `targets`, in a worker: the bundle paths are
    made here, so that the collecting process sends each worker only their names."""
    return concat_parts([BundleRows(parts / bundle, tables, slice(first, end)) for bundle, first, end, tables in held],
                        targets)


class SliceConcat:
    """The concat step of the reduce, run alongside the map: the run's rank files (`keys`, in rank
    order) cut into contiguous slices, SLICES_PER_WORKER per worker; as soon as every file of a
    slice has its outcome (file_done), a worker concatenates the slice's bundles into a Parquet
    piece per table (_concat_slice: every bundle read once), so that only the last slices and the
    join of each table's pieces, in order, into results/ (finish) are left when the map ends.
    With one worker the files are concatenated straight into results/ by finish."""

    def __init__(self, tool: str, run_path: Path, keys: list[str], executor: Executor) -> None:
        self.tool, self.run_path, self.executor = tool, run_path, executor
        self.parts = _parts_dir(run_path, tool)
        workers = executor_workers(executor)
        count = 1 if workers == 1 else max(1, min(len(keys), workers * SLICES_PER_WORKER))
        self.slice_of = {key: i * count // len(keys) for i, key in enumerate(keys)}
        self.left = [0] * count
        for i in self.slice_of.values():
            self.left[i] += 1
        self.files: list[dict[str, FilePart]] = [{} for _ in range(count)]
        self.order = {key: i for i, key in enumerate(keys)}
        self.sliced: dict[int, Future] = {}
        # this collect's own (a concurrent collect of the run has its own; a killed one's is removed as
        # a stale temporary, atomic.remove_stale_temps)
        self.pieces = temp_path(run_path / "derived" / tool / "pieces")

    def file_done(self, key: str, part: FilePart | None) -> None:
        """File `key` has its outcome: its part, or None (no tables, or skipped)."""
        i = self.slice_of[key]
        if part is not None and part.tables:
            self.files[i][key] = part
        self.left[i] -= 1
        if not self.left[i] and len(self.left) > 1:
            self._submit(i)

    def _submit(self, i: int) -> None:
        parts = sorted(self.files[i].items(), key=lambda kv: self.order[kv[0]])
        self.files[i] = {}                      # the slice's parts are its task's now
        if not parts:
            return
        names = sorted({name for _, part in parts for name in part.tables})
        self.pieces.mkdir(parents=True, exist_ok=True)
        self.sliced[i] = self.executor.submit(_concat_slice, self.parts, bundle_runs(p for _, p in parts),
                                              {name: self.pieces / f"{name}.{i}.parquet" for name in names})

    def finish(self, cross_rank: Callable[[dict[str, list[Path]] | None], list[Future]], rewritten: Iterable[str],
               timed: Timed = untimed) -> tuple[list[str], list[tuple[list[str], list[str]]]]:
        """Wait for the slices (phase `concat`), then join each table's pieces into results/ while the
        cross-rank steps (`cross_rank(pieces)`: their futures) read the pieces (phase `join, cross-rank`);
        a table in `rewritten` is joined only where no step wrote it. With one slice the tables are
        concatenated straight into results/, which the steps read then (`cross_rank(None)`).
        Returns the table names written and the steps' outcomes (a step's error is raised once every
        table is written; DamagedCache when a cached part does not read: the manifest is dropped)."""
        from hpcprof.results import table_path

        def damaged(exc: Exception) -> DamagedCache:  # a cached part whose footer reads but whose data does not
            (self.parts / MANIFEST).unlink(missing_ok=True)  # every part is made again
            return DamagedCache(f"{self.parts}: a cached part does not read ({_short(exc)})")

        def target(name: str) -> Path:
            return table_path(self.run_path, f"{self.tool}_{name}")

        def join(pieces: dict[str, list[Path]], names: Iterable[str]) -> list[Future]:
            return [self.executor.submit(concat_pieces, pieces[name], target(name)) for name in names]

        pieces: dict[str, list[Path]] | None = None
        try:
            with timed("concat"):
                if len(self.left) == 1:
                    parts = sorted(self.files[0].items(), key=lambda kv: self.order[kv[0]])
                    names = sorted({name for _, part in parts for name in part.tables})
                    tables = sorted(self.executor.submit(_concat_slice, self.parts, bundle_runs(p for _, p in parts),
                                                         {name: target(name) for name in names}).result())
                else:
                    in_slice = [self.sliced[i].result() if i in self.sliced else [] for i in range(len(self.left))]
                    tables = sorted({name for written in in_slice for name in written})
                    pieces = {name: [self.pieces / f"{name}.{i}.parquet" for i, written in enumerate(in_slice)
                                     if name in written] for name in tables}
        except Exception as exc:
            shutil.rmtree(self.pieces, ignore_errors=True)
            raise damaged(exc) from None
        failed: Exception | None = None
        try:
            with timed("cross-rank" if pieces is None else "join, cross-rank"):
                joined = [] if pieces is None else join(pieces, (name for name in tables if name not in rewritten))
                outcomes = []
                for future in cross_rank(pieces):
                    try:
                        outcomes.append(future.result())
                    except Exception as exc:  # raised once the tables are joined
                        failed = failed or exc
                if pieces is not None:
                    made = {name for reduced, _ in outcomes for name in reduced}
                    joined += join(pieces, (name for name in tables
                                            if name in rewritten and f"{self.tool}_{name}" not in made))
                    raced = sorted(made & {f"{self.tool}_{name}" for name in tables if name not in rewritten})
                    if raced:   # joined at the same time: which one is left is chance
                        failed = failed or RuntimeError(f"a cross-rank step of {self.tool} replaced {', '.join(raced)}, "
                                                        "which its collector's `rewritten` does not name")
                try:
                    for future in joined:
                        future.result()
                except Exception as exc:
                    raise damaged(exc) from None
        finally:
            shutil.rmtree(self.pieces, ignore_errors=True)
        if failed is not None:
            raise failed
        return tables, outcomes


def reduce_parts(tool: str, run_path: Path, mapped: dict[str, FilePart], executor: Executor | None = None,
                 log: Log = print, timed: Timed = untimed, concat: SliceConcat | None = None) -> list[str]:
    """Tables of the whole run from the per-file parts: each table concatenated (`concat`, the
    SliceConcat that map_files fed, finished; else one made of `mapped`) and the tool's cross-rank
    steps (e.g. nsys's NCCL summary across ranks), each in its own task, all in `executor`'s workers
    so that this process never holds the rows of all ranks (phases: SliceConcat.finish). Returns
    the table names written."""
    from hpcprof.analysis.registry import collector

    executor = executor or InProcess()
    if concat is None:
        concat = SliceConcat(tool, run_path, list(mapped), executor)
        for key, part in mapped.items():
            concat.file_done(key, part)
    tool_collector = collector(tool)

    def cross_rank(pieces: dict[str, list[Path]] | None) -> list[Future]:
        return [executor.submit(cross_rank_tables, tool, run_path, i, pieces)
                for i in range(len(tool_collector.reducers()))]

    tables, done = concat.finish(cross_rank, tool_collector.rewritten, timed)
    written = [f"{tool}_{name}" for name in tables]
    for line in (line for _, notes in done for line in notes):
        log(line)
    return written + [name for reduced, _ in done for name in reduced if name not in written]


class DamagedCache(Exception):
    """collect's own cache of per-file parts is damaged: it is made again."""


# ---------------------------------------------------------------------------------------------
# one run


def rank_files(profile_dir: Path, problem: Report) -> dict[str, int]:
    """The per-rank files of a profile directory (a rank in the name) with their ranks, in name
    order, their paths as text (making and hashing a Path costs ~8 us on Python 3.12: 0.13 s of the
    0.15 s this took for 16,384 ranks on the H200 hosts warm, 0.20-0.38 s in a collect; 0.04-0.07 s
    now); every entry named like one that is not a readable regular file (a directory, a symlink
    loop, a dangling link) is a Problem. One read of the directory: a regular file's type is in the
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


def echo_baseline(run: RunDir) -> RunDir | None:
    """The world-size-1 run of the same DDP model under nsys in `run`'s sweep, if any (Echo's
    baseline: nsys/echo.py decides which run is one)."""
    from hpcprof.analysis.nsys.echo import is_baseline_for

    sweep = sweep_of(run.run_id)
    for other in sorted(run.path.parent.glob(f"{sweep}*/config.json")):
        cand = RunDir(other.parent)
        if cand.path != run.path and sweep_of(cand.run_id) == sweep and is_baseline_for(run.config, cand.config):
            return cand
    return None


def collect_run(run: RunDir, store: Store, log: Log = print, executor: Executor | None = None) -> Collected:
    """Collect one run; every step is isolated, problems are returned and recorded."""
    from hpcprof.analysis.collector import CollectContext
    from hpcprof.analysis.forensics.verdict import forensics_tables
    from hpcprof.analysis.registry import collector

    done = Collected(run.run_id, log)
    executor = executor or InProcess()
    for directory in (run.path / "results", run.path / "derived"):
        remove_stale_temps(directory)  # what a killed collect was writing
    forget_headline(run.path)  # until the summary step records the new tables' headline

    def step(label: str, fn: Callable[[], None], timed: bool = True) -> None:
        """fn() as phase `label` (`timed`: False where fn times its own phases)."""
        try:
            with done.timed(label) if timed else contextlib.nullcontext():
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
    tool = config["experiment"]["profile"]["tool"]
    profile_dir = run.path / "profiles" / tool

    def missing() -> None:  # a rank the profile was asked of that recorded nothing makes the run partial
        from hpcprof.analysis.nsys.collect import missing_profiles

        for line in missing_profiles(run.path, config):
            done.report(Problem(None, line))

    own_steps_done = False

    def own_steps(during: str = "") -> None:
        """This process's own light steps, once: while the workers analyse the rank files (`during`
        the map phase), else on their own."""
        nonlocal own_steps_done
        if own_steps_done:
            return
        own_steps_done = True
        suffix = f" (during {during})" if during else ""
        step("workload" + suffix, lambda: save("workload", workload_tables(run.path / "results", done.report)))
        step("files" + suffix, lambda: save("files", {"manifest": manifest(run)}))
        step("profiles" + suffix, missing)
        step("forensics" + suffix, lambda: save("forensics", forensics_tables(run)))

    def profiles() -> None:
        with done.timed("inputs"), gc_paused():
            files = rank_files(profile_dir, done.report)
        if not files:
            log(f"{run.run_id}: no {tool} profiles in {profile_dir}")
            return
        site_paths = config["site"]["paths"]
        tool_paths = {"nsys": site_paths["nsys"], "ncu": site_paths["ncu"]}
        ctx = CollectContext(run_dir=run.path, tool=tool, files=list(files), rank_of=files,
                             work_dir=run.path / "derived" / tool, log=log, problem=done.report)
        ctx.work_dir.mkdir(parents=True, exist_ok=True)
        with done.timed("inputs"), gc_paused():
            inputs = collector(tool, tool_paths).inputs(ctx)
        keys = [key for _, key in sorted((rank, _part_key(path)) for path, rank in inputs.items())]
        concat = SliceConcat(tool, run.path, keys, executor)     # concatenates slices as the map goes
        with done.timed("map"):
            mapped = map_files(tool, inputs, run.path, executor, log, done.report, tool_paths,
                               meanwhile=partial(own_steps, "map"), on_file=concat.file_done)
        if any(part.tables for part in mapped.values()):
            try:
                done.tables.extend(reduce_parts(tool, run.path, mapped, executor, log, done.timed, concat))
            except DamagedCache as exc:
                log(f"{run.run_id}: {exc}; made again")
                with done.timed("map"):
                    mapped = map_files(tool, inputs, run.path, executor, log, done.report, tool_paths)
                done.tables.extend(reduce_parts(tool, run.path, mapped, executor, log, done.timed))
        elif mapped:
            log(f"{run.run_id}: {tool}: nothing to analyse in its profiles")
        else:
            done.report(Problem(profile_dir, f"no usable {tool} profile"))

    if tool != "none" and profile_dir.is_dir():
        step(tool, profiles, timed=False)   # its phases: inputs, map, concat, join, cross-rank
    own_steps()                             # when there was no map to overlap

    def echo() -> None:  # Echo's flow: a ws-N DDP run against its sweep's ws-1 run
        from hpcprof.analysis.nsys.echo import echo_slowdown, wants_baseline

        base = echo_baseline(run) if wants_baseline(config) else None
        if base is not None:
            rule = (config["experiment"].get("analysis") or {}).get("slowdown_match", "hpcprof")
            save("echo", echo_slowdown(run.path, base.path, log, rule))

    step("echo", echo)

    def summary() -> None:
        from hpcprof.analysis.summary import run_headline

        # in a worker: the summary reads whole-run tables, which this process never holds
        headline = executor.submit(run_headline, run.path, config).result()
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
    """What a worker imports before its first task: this module, the summary and every collector."""
    from hpcprof.analysis.registry import COLLECTORS

    return [__name__, "hpcprof.analysis.summary", *(spec.partition(":")[0] for spec in COLLECTORS.values())]


def collect_runs(selected: list[RunDir], store: Store, refresh: Callable[[RunDir], Any], log: Log,
                 workers: int = 1) -> int:
    """Collect every terminal run of `selected`, each isolated; returns the exit status
    (0, or EXIT_PARTIAL when a run had a Problem or could not be collected)."""
    skipped = False
    executor, how = make_executor(workers, _worker_modules())
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
                        mark_collected(run, store, [f"not collected: {_short(exc)}"])
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
